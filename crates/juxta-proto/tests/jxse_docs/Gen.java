// Prints documents built by real JXSE 2.7 classes, for byte-exact tests
// (crates/juxta-proto/tests/advertisements.rs reads the output,
// jxse-2.7-documents.txt). Regenerate with the interop harness's jars:
//   J=interop/jxse/target; javac -cp "$J/classes:$J/lib/*" Gen.java
//   java -Dnet.jxta.logging.Logging=OFF -cp ".:$J/classes:$J/lib/*" Gen > jxse-2.7-documents.txt
import net.jxta.document.*;
import net.jxta.id.*;
import net.jxta.peer.*;
import net.jxta.peergroup.*;
import net.jxta.platform.*;
import net.jxta.protocol.*;
import net.jxta.pipe.PipeService;
import net.jxta.endpoint.EndpointAddress;
import net.jxta.impl.protocol.*;
import java.net.URI;
import java.io.*;
import java.util.*;

public class Gen {
    static void out(String name, Object doc) {
        System.out.print("=====" + name + "\n" + doc.toString() + "=====END\n");
    }
    static String xml(Advertisement a) { return a.getDocument(MimeMediaType.XMLUTF8).toString(); }
    public static void main(String[] args) throws Exception {
        PeerID pid = (PeerID) IDFactory.fromURI(new URI("urn:jxta:cbid-59616261646162614A78746150325033D9D9238EC0EEFCB122CB5D3DFE39A9CC03"));
        PeerGroupID gid = (PeerGroupID) IDFactory.fromURI(new URI("urn:jxta:cbid-A1B2C3D4E5F60718A9BACBDCEDFE0F1002"));
        ModuleSpecID msid = (ModuleSpecID) IDFactory.fromURI(new URI("urn:jxta:uuid-DEADBEEFDEAFBABAFEEDBABE000000010306"));
        ModuleClassID mcid = (ModuleClassID) IDFactory.fromURI(new URI("urn:jxta:uuid-DEADBEEFDEAFBABAFEEDBABE0000000505"));

        PeerGroupAdvertisement pga = (PeerGroupAdvertisement) AdvertisementFactory.newAdvertisement(PeerGroupAdvertisement.getAdvertisementType());
        pga.setPeerGroupID(gid); pga.setModuleSpecID(msid); pga.setName("club"); pga.setDescription("a club");
        StructuredTextDocument parm = (StructuredTextDocument) StructuredDocumentFactory.newStructuredDocument(MimeMediaType.XMLUTF8, "Parm");
        parm.appendChild(parm.createElement("login", "alice:" + net.jxta.impl.membership.passwd.PasswdMembershipService.makePsswd("secret") + ":"));
        pga.putServiceParam(mcid, parm);
        out("PGA", xml(pga));

        ModuleClassAdvertisement mca = (ModuleClassAdvertisement) AdvertisementFactory.newAdvertisement(ModuleClassAdvertisement.getAdvertisementType());
        mca.setModuleClassID((ModuleClassID) IDFactory.fromURI(new URI("urn:jxta:uuid-DEADBEEFDEAFBABAFEEDBABE0000000305")));
        mca.setName("Discovery"); mca.setDescription("disc");
        out("MCA", xml(mca));

        ModuleSpecAdvertisement msa = (ModuleSpecAdvertisement) AdvertisementFactory.newAdvertisement(ModuleSpecAdvertisement.getAdvertisementType());
        msa.setModuleSpecID(msid); msa.setName("spec"); msa.setVersion("1.0");
        PipeAdvertisement pipe = (PipeAdvertisement) AdvertisementFactory.newAdvertisement(PipeAdvertisement.getAdvertisementType());
        pipe.setPipeID(IDFactory.fromURI(new URI("urn:jxta:cbid-59616261646162614E504720503250331BCCB518AD964EAEB85FC21D6192727604")));
        pipe.setType(PipeService.PropagateType);
        msa.setPipeAdvertisement(pipe);
        out("MSA", xml(msa));

        ModuleImplAdvertisement mia = (ModuleImplAdvertisement) AdvertisementFactory.newAdvertisement(ModuleImplAdvertisement.getAdvertisementType());
        mia.setModuleSpecID(msid);
        StructuredTextDocument comp = (StructuredTextDocument) StructuredDocumentFactory.newStructuredDocument(MimeMediaType.XMLUTF8, "Comp");
        comp.appendChild(comp.createElement("Efmt", "JDK1.4.1"));
        comp.appendChild(comp.createElement("Bind", "V2.0 Ref Impl"));
        mia.setCompat(comp); mia.setCode("net.jxta.impl.peergroup.StdPeerGroup"); mia.setDescription("impl");
        out("MIA", xml(mia));

        RouteAdvertisement ra = (RouteAdvertisement) AdvertisementFactory.newAdvertisement(RouteAdvertisement.getAdvertisementType());
        ra.setDestPeerID(pid);
        AccessPointAdvertisement apa = (AccessPointAdvertisement) AdvertisementFactory.newAdvertisement(AccessPointAdvertisement.getAdvertisementType());
        apa.addEndpointAddress(new EndpointAddress("tcp://127.0.0.1:9701"));
        ra.setDest(apa);
        AccessPointAdvertisement hop = (AccessPointAdvertisement) AdvertisementFactory.newAdvertisement(AccessPointAdvertisement.getAdvertisementType());
        hop.setPeerID(pid); hop.addEndpointAddress(new EndpointAddress("tcp://10.0.0.1:9701"));
        Vector<AccessPointAdvertisement> hops = new Vector<AccessPointAdvertisement>(); hops.add(hop);
        ra.setHops(hops);
        out("RA", xml(ra));

        RdvAdvertisement rdv = (RdvAdvertisement) AdvertisementFactory.newAdvertisement(RdvAdvertisement.getAdvertisementType());
        rdv.setGroupID(PeerGroupID.defaultNetPeerGroupID); rdv.setPeerID(pid); rdv.setServiceName("JxtaPropagate"); rdv.setName("rdv");
        RouteAdvertisement ra2 = (RouteAdvertisement) AdvertisementFactory.newAdvertisement(RouteAdvertisement.getAdvertisementType());
        ra2.setDestPeerID(pid); ra2.setDest(apa);
        rdv.setRouteAdv(ra2);
        out("RDV", xml(rdv));

        PeerAdvertisement pa = (PeerAdvertisement) AdvertisementFactory.newAdvertisement(PeerAdvertisement.getAdvertisementType());
        pa.setPeerID(pid); pa.setPeerGroupID(PeerGroupID.defaultNetPeerGroupID); pa.setName("alice");
        out("PA", xml(pa));
        out("PASTR", pa.toString());

        DiscoveryQuery dq = new DiscoveryQuery();
        dq.setDiscoveryType(0); dq.setThreshold(1); dq.setPeerAdvertisement(pa); dq.setAttr("Name"); dq.setValue("al*");
        out("DQ", dq.getDocument(MimeMediaType.XMLUTF8).toString());

        DiscoveryResponse dr = new DiscoveryResponse();
        dr.setDiscoveryType(2); dr.setPeerAdvertisement(pa); dr.setQueryAttr("Name"); dr.setQueryValue("x");
        List<String> resps = new ArrayList<String>(); resps.add(pipe.toString());
        List<Long> exps = new ArrayList<Long>(); exps.add(7200000L);
        dr.setResponses(resps); dr.setExpirations(exps);
        out("DR", dr.getDocument(MimeMediaType.XMLUTF8).toString());

        PeerInfoQueryMsg piq = new PeerInfoQueryMsg();
        piq.setSourcePid(pid); piq.setTargetPid(pid);
        out("PIQ", piq.getDocument(MimeMediaType.XMLUTF8).toString());
        PeerInfoResponseMsg pir = new PeerInfoResponseMsg();
        pir.setSourcePid(pid); pir.setTargetPid(pid); pir.setUptime(5); pir.setTimestamp(1700000000000L);
        out("PIR", pir.getDocument(MimeMediaType.XMLUTF8).toString());
    }
}
