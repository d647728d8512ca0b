package org.juxta.harness;

import java.util.ArrayList;
import java.util.Enumeration;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;

import net.jxta.discovery.DiscoveryEvent;
import net.jxta.discovery.DiscoveryListener;
import net.jxta.discovery.DiscoveryService;
import net.jxta.document.Advertisement;
import net.jxta.document.AdvertisementFactory;
import net.jxta.id.ID;
import net.jxta.id.IDFactory;
import net.jxta.peer.PeerID;
import net.jxta.peergroup.PeerGroup;
import net.jxta.pipe.PipeService;
import net.jxta.protocol.PipeAdvertisement;
import net.jxta.rendezvous.RendezVousService;
import net.jxta.rendezvous.RendezvousEvent;

/**
 * Discovery and rendezvous commands (DISC_*, RDV_*): what Juxta's rendezvous interop tests need
 * a real JXSE edge or rendezvous to do.
 *
 * <ul>
 * <li>{@code RDV_STATUS}: {@code RDV <status> <connected> <peer IDs of the rendezvous view or,
 * on a rendezvous, of its edges, comma-separated or ->}.</li>
 * <li>{@code DISC_PUBLISH <name>}: a new unicast pipe advertisement named {@code name},
 * published locally (JXSE indexes it for SRDI); answers {@code PUBLISHED <pipe ID>}.</li>
 * <li>{@code DISC_PUSH}: pushes all SRDI entries of the discovery service to the rendezvous
 * now ({@code DiscoveryServiceImpl.pushEntries(true)}, what JXSE does itself when it gains a
 * lease; otherwise deltas go every 30 s); answers {@code PUSHED}.</li>
 * <li>{@code DISC_REMOTE <attr> <value> <timeoutMs>}: asks the group (through the rendezvous)
 * for pipe advertisements with {@code attr = value}, re-asking every second until one arrives
 * or the timeout; answers {@code FOUND <name> <pipe ID>} or {@code NOTFOUND}.</li>
 * <li>{@code DISC_LOCAL <attr> <value>}: {@code LOCAL <count> <names comma-separated or ->}.</li>
 * </ul>
 */
final class Discovery {
    private final PeerGroup group;
    private final DiscoveryService disc;
    private final RendezVousService rdv;
    /**
     * Rendezvous this edge can send to. JXSE's {@code isConnectedToRendezVous()} turns true when
     * a lease is entered in its table ({@code EdgePeerRdvService.addRdv}), before the
     * connection is marked connected and its messenger obtained; a message propagated in that
     * window is skipped without a word ({@code sendToEachConnection}). {@code RDVCONNECT} and
     * {@code RDVRECONNECT} are raised after both, so RDV_STATUS reports "connected" only for a
     * rendezvous one of them named.
     */
    private final Set<ID> usable = ConcurrentHashMap.newKeySet();

    Discovery(PeerGroup group) {
        this.group = group;
        this.disc = group.getDiscoveryService();
        this.rdv = group.getRendezVousService();
        rdv.addListener(ev -> {
            switch (ev.getType()) {
                case RendezvousEvent.RDVCONNECT:
                case RendezvousEvent.RDVRECONNECT:
                    usable.add(ev.getPeerID());
                    break;
                case RendezvousEvent.RDVDISCONNECT:
                case RendezvousEvent.RDVFAILED:
                    usable.remove(ev.getPeerID());
                    break;
                default:
                    break;
            }
        });
        // A lease granted before this listener existed raised its event unseen.
        usable.addAll(rdv.getLocalRendezVousView());
    }

    /** The answer line, or null when {@code cmd} is not one of ours. */
    String dispatch(String cmd, String[] parts) throws Exception {
        switch (cmd) {
            case "RDV_STATUS":
                return status();
            case "DISC_PUBLISH":
                return publish(parts);
            case "DISC_PUSH":
                return push();
            case "DISC_REMOTE":
                return remote(parts);
            case "DISC_LOCAL":
                return local(parts);
            default:
                return null;
        }
    }

    private String status() {
        List<PeerID> view = rdv.isRendezVous() ? rdv.getLocalEdgeView() : rdv.getLocalRendezVousView();
        StringBuilder ids = new StringBuilder();
        for (PeerID p : view) {
            if (ids.length() > 0) {
                ids.append(',');
            }
            ids.append(p);
        }
        boolean connected = rdv.isConnectedToRendezVous();
        if (connected && !rdv.isRendezVous()) {
            connected = false;
            for (PeerID p : view) {
                connected |= usable.contains(p);
            }
        }
        return "RDV " + rdv.getRendezVousStatus() + " " + connected + " "
                + (ids.length() == 0 ? "-" : ids.toString());
    }

    private String publish(String[] parts) throws Exception {
        if (parts.length != 2) {
            return "ERROR usage: DISC_PUBLISH <name>";
        }
        PipeAdvertisement adv = (PipeAdvertisement) AdvertisementFactory
                .newAdvertisement(PipeAdvertisement.getAdvertisementType());
        adv.setPipeID(IDFactory.newPipeID(group.getPeerGroupID()));
        adv.setType(PipeService.UnicastType);
        adv.setName(parts[1]);
        disc.publish(adv);
        return "PUBLISHED " + adv.getPipeID();
    }

    private String push() {
        if (!(disc instanceof net.jxta.impl.discovery.DiscoveryServiceImpl)) {
            return "ERROR discovery service is not DiscoveryServiceImpl";
        }
        ((net.jxta.impl.discovery.DiscoveryServiceImpl) disc).pushEntries(true);
        return "PUSHED";
    }

    private String remote(String[] parts) throws Exception {
        if (parts.length != 4) {
            return "ERROR usage: DISC_REMOTE <attr> <value> <timeoutMs>";
        }
        String attr = parts[1];
        String value = parts[2];
        long timeoutMs = Long.parseLong(parts[3]);
        ConcurrentHashMap<String, String> found = new ConcurrentHashMap<>();
        Object signal = new Object();
        DiscoveryListener l = (DiscoveryEvent ev) -> {
            Enumeration<Advertisement> en = ev.getResponse().getAdvertisements();
            while (en.hasMoreElements()) {
                Advertisement a = en.nextElement();
                if (a instanceof PipeAdvertisement) {
                    PipeAdvertisement p = (PipeAdvertisement) a;
                    found.put(String.valueOf(p.getPipeID()), String.valueOf(p.getName()));
                }
            }
            synchronized (signal) {
                signal.notifyAll();
            }
        };
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(timeoutMs);
        while (found.isEmpty() && System.nanoTime() < deadline) {
            disc.getRemoteAdvertisements(null, DiscoveryService.ADV, attr, value, 10, l);
            long until = Math.min(deadline, System.nanoTime() + TimeUnit.SECONDS.toNanos(1));
            synchronized (signal) {
                while (found.isEmpty() && System.nanoTime() < until) {
                    long waitMs = Math.max(1, TimeUnit.NANOSECONDS.toMillis(until - System.nanoTime()));
                    signal.wait(waitMs);
                }
            }
        }
        if (found.isEmpty()) {
            return "NOTFOUND";
        }
        java.util.Map.Entry<String, String> e = found.entrySet().iterator().next();
        return "FOUND " + e.getValue() + " " + e.getKey();
    }

    private String local(String[] parts) throws Exception {
        if (parts.length != 3) {
            return "ERROR usage: DISC_LOCAL <attr> <value>";
        }
        Enumeration<Advertisement> en = disc.getLocalAdvertisements(DiscoveryService.ADV, parts[1], parts[2]);
        List<String> names = new ArrayList<>();
        while (en.hasMoreElements()) {
            Advertisement a = en.nextElement();
            if (a instanceof PipeAdvertisement) {
                names.add(String.valueOf(((PipeAdvertisement) a).getName()));
            }
        }
        return "LOCAL " + names.size() + " " + (names.isEmpty() ? "-" : String.join(",", names));
    }
}
