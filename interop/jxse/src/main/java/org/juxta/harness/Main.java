package org.juxta.harness;

import java.io.BufferedReader;
import java.io.File;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.HexFormat;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.logging.Handler;
import java.util.logging.Level;
import java.util.logging.Logger;
import java.util.stream.Stream;

import net.jxta.endpoint.ByteArrayMessageElement;
import net.jxta.endpoint.EndpointAddress;
import net.jxta.endpoint.EndpointListener;
import net.jxta.endpoint.EndpointService;
import net.jxta.endpoint.Message;
import net.jxta.endpoint.MessageElement;
import net.jxta.endpoint.Messenger;
import net.jxta.endpoint.OutgoingMessageEvent;
import net.jxta.endpoint.OutgoingMessageEventListener;
import net.jxta.endpoint.router.EndpointRoutingTransport;
import net.jxta.endpoint.router.RouteController;
import net.jxta.document.AdvertisementFactory;
import net.jxta.id.IDFactory;
import net.jxta.peer.PeerID;
import net.jxta.protocol.RouteAdvertisement;
import net.jxta.peergroup.PeerGroup;
import net.jxta.platform.NetworkConfigurator;
import net.jxta.platform.NetworkManager;

/**
 * A JXSE 2.7 peer driven by a line protocol on stdin/stdout (see README.md).
 *
 * stdout carries protocol lines only; everything else (JXSE logging, our own
 * diagnostics, anything written to System.out by libraries) goes to stderr.
 */
public final class Main {

    static final String SERVICE = "JuxtaTest";
    static final String NS = "juxta";
    static final String PAYLOAD = "payload";
    static final String ACK = "ack";

    /**
     * After a successful SEND to a physical address (tcp://...), tell the router that the
     * peer at the other end (as named in its welcome line) is reachable there, so that later
     * jxta://<peer> sends work. JXSE does not do this by itself for connections it opens
     * (it only learns routes from incoming connections and from route discovery, which has
     * nothing to talk to on an isolated loopback setup). -Djuxta.harness.learnRoutes=false
     * turns it off; the ROUTE command does the same thing explicitly.
     */
    static final boolean LEARN_ROUTES =
            Boolean.parseBoolean(System.getProperty("juxta.harness.learnRoutes", "true"));

    /** Timeout for resolving a messenger and for a synchronous send (ms). */
    static final long SEND_TIMEOUT_MS = Long.getLong("juxta.harness.sendTimeoutMs", 20_000L);

    private static final Logger LOG = Logger.getLogger(Main.class.getName());
    private static final Object OUT_LOCK = new Object();
    private static PrintStream proto;

    private NetworkManager manager;
    private PeerGroup netGroup;
    private EndpointService endpoint;
    private String peerId;
    private Pipes pipes;
    private Bench bench;

    /** Replies (echo, ack) run here, off JXSE's delivery threads, in arrival order. */
    private final ExecutorService replies = Executors.newSingleThreadExecutor(r -> {
        Thread t = new Thread(r, "juxta-harness-replies");
        t.setDaemon(true);
        return t;
    });
    /** Reply messengers, kept strongly referenced (JXSE only caches them weakly). */
    private final Map<EndpointAddress, Messenger> replyMessengers = new ConcurrentHashMap<>();
    private final Set<String> learnedRoutes = ConcurrentHashMap.newKeySet();
    private final AtomicLong acksSent = new AtomicLong();
    /** Rendezvous seeds: non-empty makes this peer an edge leasing one of them. */
    private List<String> rdvSeeds = new ArrayList<>();
    /** With --relay-seed: relay client on, leasing only these relays. */
    private List<String> relaySeeds = new ArrayList<>();
    /** With --no-incoming: TCP outgoing only (a peer nobody can dial, reached through its relay). */
    private boolean noIncoming;
    /** Whether this peer is a rendezvous. */
    private boolean rendezvous;
    /** With --lan: the address of the LAN interface (TCP and multicast there); else loopback. */
    private String lanAddress;
    /** With --http-port: JXSE's HTTP servlet transport (Jetty) listening on host:port, and its client on. */
    private int httpPort = -1;
    /** With --http-client: JXSE's HTTP client on (reaches http://host:port addresses), no listener. */
    private boolean httpClient;
    private Discovery discovery;
    private final AtomicLong ackRepliesSeen = new AtomicLong();

    public static void main(String[] args) {
        // Keep the real stdout for protocol lines; route System.out to stderr.
        proto = new PrintStream(new FileOutputStream(FileDescriptor.out), false, StandardCharsets.UTF_8);
        System.setOut(System.err);
        quietLogging();

        int port = -1;
        String home = null;
        String name = "juxta-harness";
        List<String> rdvSeeds = new ArrayList<>();
        List<String> relaySeeds = new ArrayList<>();
        boolean noIncoming = false;
        boolean rendezvous = false;
        String lan = null;
        int httpPort = -1;
        boolean httpClient = false;
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            String v = (i + 1 < args.length) ? args[i + 1] : null;
            switch (a) {
                case "--port": port = Integer.parseInt(require(a, v)); i++; break;
                case "--home": home = require(a, v); i++; break;
                case "--name": name = require(a, v); i++; break;
                case "--rdv-seed": rdvSeeds.add(require(a, v)); i++; break;
                case "--relay-seed": relaySeeds.add(require(a, v)); i++; break;
                case "--no-incoming": noIncoming = true; break;
                case "--rendezvous": rendezvous = true; break;
                case "--lan": lan = require(a, v); i++; break;
                case "--http-port": httpPort = Integer.parseInt(require(a, v)); i++; break;
                case "--http-client": httpClient = true; break;
                case "-h":
                case "--help":
                    System.err.println("usage: Main --port P [--home DIR] [--name NAME] [--rdv-seed tcp://127.0.0.1:P]... [--relay-seed tcp://127.0.0.1:P]... [--no-incoming] [--rendezvous] [--lan IP] [--http-port P] [--http-client]");
                    System.exit(0);
                    return;
                default:
                    System.err.println("unknown argument: " + a);
                    System.exit(2);
                    return;
            }
        }
        if (port <= 0 || port > 65535) {
            System.err.println("usage: Main --port P [--home DIR] [--name NAME]  (--port is required)");
            System.exit(2);
            return;
        }

        if (rendezvous && !rdvSeeds.isEmpty()) {
            System.err.println("--rendezvous and --rdv-seed exclude each other");
            System.exit(2);
            return;
        }
        Main main = new Main();
        main.rdvSeeds = rdvSeeds;
        main.relaySeeds = relaySeeds;
        main.noIncoming = noIncoming;
        main.rendezvous = rendezvous;
        main.lanAddress = lan;
        main.httpPort = httpPort;
        main.httpClient = httpClient;
        int rc;
        try {
            rc = main.run(port, home, name);
        } catch (Throwable t) {
            t.printStackTrace(System.err);
            out("ERROR startup failed: " + oneLine(t));
            rc = 1;
        }
        System.exit(rc);
    }

    private static String require(String flag, String value) {
        if (value == null) {
            System.err.println("missing value for " + flag);
            System.exit(2);
        }
        return value;
    }

    /** JXSE reads net.jxta.logging.Logging once, when net.jxta.logging.Logging loads. */
    private static void quietLogging() {
        String level = System.getProperty("net.jxta.logging.Logging");
        if (level == null) {
            level = "WARNING";
            System.setProperty("net.jxta.logging.Logging", level);
        }
        Level jul;
        try {
            jul = Level.parse(level);
        } catch (IllegalArgumentException bad) {
            jul = Level.WARNING;
        }
        Logger root = Logger.getLogger("");
        root.setLevel(jul);
        for (Handler h : root.getHandlers()) {
            h.setLevel(jul);
        }
    }

    static void out(String line) {
        // One protocol line per call, whatever the text (exception messages, JXSE toString()s).
        line = line.replaceAll("[\\r\\n]+", " ");
        synchronized (OUT_LOCK) {
            proto.print(line);
            proto.print('\n');
            proto.flush();
        }
    }

    private int run(int port, String homeArg, String name) throws Exception {
        String host = lanAddress != null ? lanAddress : "127.0.0.1";
        checkPortFree(host, port);
        if (httpPort > 0) {
            checkPortFree(host, httpPort);
        }
        Path home;
        boolean tempHome = false;
        if (homeArg == null) {
            home = Files.createTempDirectory("jxse-harness-");
            tempHome = true;
            Path doomed = home;   // also clean up when killed with SIGTERM/SIGINT
            Runtime.getRuntime().addShutdownHook(new Thread(() -> deleteTree(doomed), "juxta-harness-rm-home"));
        } else {
            home = Path.of(homeArg).toAbsolutePath();
            Files.createDirectories(home);
        }

        long t0 = System.nanoTime();
        NetworkManager.ConfigMode mode = rendezvous ? NetworkManager.ConfigMode.RENDEZVOUS
                : rdvSeeds.isEmpty() && relaySeeds.isEmpty() ? NetworkManager.ConfigMode.ADHOC
                : NetworkManager.ConfigMode.EDGE;
        manager = new NetworkManager(mode, name, home.toUri());
        configure(manager.getConfigurator(), host, port, rdvSeeds, rendezvous, lanAddress != null);
        configureRelay(manager.getConfigurator(), relaySeeds, noIncoming);
        configureHttp(manager.getConfigurator(), host, httpPort, httpClient);
        netGroup = manager.startNetwork();
        endpoint = netGroup.getEndpointService();
        peerId = netGroup.getPeerID().toString();

        endpoint.addIncomingMessageListener(this::onSink, SERVICE, "sink");
        endpoint.addIncomingMessageListener(this::onSink, SERVICE, "echo-reply");
        endpoint.addIncomingMessageListener(this::onEcho, SERVICE, "echo");
        endpoint.addIncomingMessageListener(this::onAck, SERVICE, "ack");
        endpoint.addIncomingMessageListener((m, s, d) -> ackRepliesSeen.incrementAndGet(), SERVICE, "ack-reply");
        pipes = new Pipes(netGroup);
        bench = new Bench(netGroup);
        discovery = new Discovery(netGroup);
        if (Boolean.getBoolean("juxta.harness.trace")) {
            Trace.install(endpoint);
        }

        System.err.printf("juxta-harness: %s started in %d ms, home %s, CBJX %s%n", peerId,
                TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0), home,
                Boolean.getBoolean("net.jxta.endpoint.WireFormatMessageFactory.CBJX_DISABLE") ? "off" : "on");
        out("READY " + peerId + " tcp://" + host + ":" + port
                + (httpPort > 0 ? " http://" + host + ":" + httpPort : ""));

        try {
            commandLoop();
        } finally {
            shutdown(home, tempHome);
        }
        return 0;
    }

    private static void checkPortFree(String host, int port) throws IOException {
        try (ServerSocket probe = new ServerSocket()) {
            probe.setReuseAddress(true);
            probe.bind(new InetSocketAddress(InetAddress.getByName(host), port));
        } catch (IOException busy) {
            throw new IOException(host + ":" + port + " is not available: " + busy.getMessage(), busy);
        }
    }

    /**
     * TCP only on 127.0.0.1:port, everything else off. ADHOC with no seeds by default; an edge
     * leasing only the given rendezvous seeds (loopback addresses) with --rdv-seed; a
     * rendezvous with --rendezvous. With --lan IP: TCP on IP instead of loopback, and IP
     * multicast on (JXSE's default group 224.0.1.85:1234) through the interface with IP.
     */
    private static void configure(NetworkConfigurator c, String host, int port, List<String> rdvSeeds,
            boolean rendezvous, boolean multicast) {
        c.setMode(rendezvous ? NetworkConfigurator.RDV_NODE
                : rdvSeeds.isEmpty() ? NetworkConfigurator.ADHOC_NODE
                : NetworkConfigurator.EDGE_NODE & ~NetworkConfigurator.RELAY_CLIENT);

        c.setTcpEnabled(true);
        c.setTcpIncoming(true);
        c.setTcpOutgoing(true);
        c.setTcpInterfaceAddress(host);
        c.setTcpPort(port);
        // JXSE refuses a port range together with a public address (TCPAdv: "Dynamic ports
        // not supported with public address port forwarding"), so the range stays at -1. If
        // the port were busy, Netty would then fall back to 7901-7998 while still announcing
        // 127.0.0.1:port; checkPortFree() refuses to start in that case instead.
        c.setTcpStartPort(-1);
        c.setTcpEndPort(-1);
        c.setTcpPublicAddress(host + ":" + port, true);

        c.setHttpEnabled(false);
        c.setHttpIncoming(false);
        c.setHttpOutgoing(false);
        // NB: in 2.7 setHttp2Enabled(true) is what clears the flags; set them directly.
        c.setHttp2Enabled(false);
        c.setHttp2Incoming(false);
        c.setHttp2Outgoing(false);
        c.setUseMulticast(multicast);
        if (multicast) {
            c.setMulticastInterface(host);
        }

        c.clearRendezvousSeeds();
        c.clearRendezvousSeedingURIs();
        c.clearRelaySeeds();
        c.clearRelaySeedingURIs();
        for (String seed : rdvSeeds) {
            c.addSeedRendezvous(URI.create(seed));
        }
        c.setUseOnlyRendezvousSeeds(true);
        c.setUseOnlyRelaySeeds(true);
        // Peer ID deliberately not set: JXSE derives a cbid from its own certificate.
    }

    /**
     * --relay-seed: JXSE's relay client on (EDGE with RELAY_CLIENT), leasing only the given
     * relays; --no-incoming: TCP outgoing only, so other peers reach this one through its relay.
     */
    private static void configureRelay(NetworkConfigurator c, List<String> relaySeeds, boolean noIncoming) {
        if (!relaySeeds.isEmpty()) {
            c.setMode(NetworkConfigurator.EDGE_NODE | NetworkConfigurator.RELAY_CLIENT);
            for (String seed : relaySeeds) {
                c.addSeedRelay(URI.create(seed));
            }
            c.setUseOnlyRelaySeeds(true);
        }
        if (noIncoming) {
            c.setTcpIncoming(false);
        }
    }

    /**
     * --http-port P: JXSE's HTTP servlet transport on, its Jetty server listening on host:P
     * (announced as http://host:P) and its client on. --http-client: the client only (it
     * reaches http://host:port addresses; no listener, so nothing needs Jetty). Without
     * either, HTTP stays off (configure()).
     */
    private static void configureHttp(NetworkConfigurator c, String host, int httpPort, boolean client) {
        if (httpPort <= 0 && !client) {
            return;
        }
        c.setHttpEnabled(true);
        c.setHttpOutgoing(true);
        c.setHttpInterfaceAddress(host);
        if (httpPort > 0) {
            c.setHttpIncoming(true);
            c.setHttpPort(httpPort);
            c.setHttpPublicAddress(host + ":" + httpPort, true);
        } else {
            c.setHttpIncoming(false);
        }
    }

    private void commandLoop() throws IOException {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            line = line.trim();
            if (line.isEmpty()) {
                continue;
            }
            String[] parts = line.split("\\s+");
            String cmd = parts[0].toUpperCase();
            try {
                switch (cmd) {
                    case "SEND":
                        out(send(parts));
                        break;
                    case "ROUTE":
                        out(route(parts));
                        break;
                    case "PEERID":
                        out("PEERID " + peerId);
                        break;
                    case "QUIT":
                        out("BYE");
                        return;
                    default:
                        String answer = pipes.dispatch(cmd, parts);
                        if (answer == null) {
                            answer = bench.dispatch(cmd, parts);   // BENCH_* (Bench.java)
                        }
                        if (answer == null) {
                            answer = discovery.dispatch(cmd, parts);   // DISC_*, RDV_* (Discovery.java)
                        }
                        if (answer == null) {
                            out("ERROR unknown command: " + parts[0]);
                        } else if (!answer.isEmpty()) {   // empty: a worker prints the answer later
                            out(answer);
                        }
                }
            } catch (Throwable t) {
                LOG.log(Level.WARNING, "command failed: " + line, t);
                out("ERROR " + oneLine(t));
            }
        }
        // EOF behaves like QUIT.
        out("BYE");
    }

    private String send(String[] parts) {
        if (parts.length != 3) {
            return "ERROR usage: SEND <endpoint address> <size>";
        }
        EndpointAddress addr;
        int size;
        try {
            addr = new EndpointAddress(parts[1]);
            size = Integer.parseInt(parts[2]);
            if (size < 0) {
                throw new NumberFormatException("negative size");
            }
        } catch (RuntimeException bad) {
            return "ERROR bad arguments: " + oneLine(bad);
        }
        byte[] payload = pattern(size);
        Message msg = new Message();
        msg.addMessageElement(NS, new ByteArrayMessageElement(PAYLOAD, null, payload, null));
        AtomicReference<Messenger> used = new AtomicReference<>();
        String err = sendSync(addr, msg, used);
        if (err != null) {
            return "ERROR " + err;
        }
        if (LEARN_ROUTES && used.get() != null) {
            learnRoute(addr, used.get());
        }
        return "SENT " + size + " " + sha256(payload);
    }

    /** ROUTE <peer URN | jxta://unique> <physical address>: add a direct route to the router. */
    private String route(String[] parts) {
        if (parts.length != 3) {
            return "ERROR usage: ROUTE <peer URN or jxta://unique> <physical address>";
        }
        String peer = parts[1];
        if (peer.startsWith("jxta://")) {
            peer = "urn:jxta:" + peer.substring("jxta://".length());
        }
        int slash = peer.indexOf('/');
        if (slash >= 0) {
            peer = peer.substring(0, slash);
        }
        EndpointAddress physical;
        try {
            physical = new EndpointAddress(new EndpointAddress(parts[2]), null, null);
        } catch (RuntimeException bad) {
            return "ERROR bad address: " + oneLine(bad);
        }
        return "ROUTED " + addDirectRoute(peer, physical);
    }

    private void learnRoute(EndpointAddress dialled, Messenger m) {
        if ("jxta".equalsIgnoreCase(dialled.getProtocolName())) {
            return;
        }
        EndpointAddress logical;
        try {
            logical = m.getLogicalDestinationAddress();
        } catch (RuntimeException unsupported) {
            return;
        }
        if (logical == null || !"jxta".equalsIgnoreCase(logical.getProtocolName())) {
            return;
        }
        String peer = "urn:jxta:" + logical.getProtocolAddress();
        EndpointAddress physical = new EndpointAddress(dialled, null, null);
        if (peer.equals(peerId) || !learnedRoutes.add(peer + " " + physical)) {
            return;
        }
        String result = addDirectRoute(peer, physical);
        System.err.println("juxta-harness: learned route " + peer + " -> " + physical + ": " + result);
    }

    /** Returns OK, ALREADY_EXIST, FAILED, ... or "ERROR-..." text. */
    private String addDirectRoute(String peerUrn, EndpointAddress physical) {
        try {
            PeerID pid = (PeerID) IDFactory.fromURI(URI.create(peerUrn));
            EndpointRoutingTransport router = endpoint.getEndpointRouter();
            if (router == null) {
                return "FAILED no-router";
            }
            RouteController rc = router.getRouteController();
            RouteAdvertisement ra = (RouteAdvertisement)
                    AdvertisementFactory.newAdvertisement(RouteAdvertisement.getAdvertisementType());
            ra.setDestPeerID(pid);
            ra.addDestEndpointAddress(physical);
            int code = rc.addRoute(ra);
            switch (code) {
                case RouteController.OK: return "OK";
                case RouteController.ALREADY_EXIST: return "ALREADY_EXIST";
                case RouteController.FAILED: return "FAILED";
                case RouteController.DIRECT_ROUTE: return "DIRECT_ROUTE";
                case RouteController.INVALID_ROUTE: return "INVALID_ROUTE";
                default: return "CODE_" + code;
            }
        } catch (Exception | LinkageError e) {
            return "FAILED " + oneLine(e).replace(' ', '_');
        }
    }

    /** Byte i = (i * 31 + 7) & 0xff. */
    static byte[] pattern(int size) {
        byte[] b = new byte[size];
        for (int i = 0; i < size; i++) {
            b[i] = (byte) ((i * 31 + 7) & 0xff);
        }
        return b;
    }

    /** Resolve a messenger and send, waiting for JXSE's success/failure report. Null on success. */
    private String sendSync(EndpointAddress addr, Message msg) {
        return sendSync(addr, msg, null);
    }

    private String sendSync(EndpointAddress addr, Message msg, AtomicReference<Messenger> used) {
        Messenger messenger;
        try {
            messenger = resolve(addr);
        } catch (InterruptedException ie) {
            Thread.currentThread().interrupt();
            return "interrupted while resolving " + addr;
        }
        if (messenger == null) {
            return "no messenger for " + addr + " (unresolvable or unsupported within " + SEND_TIMEOUT_MS + " ms)";
        }
        if (used != null) {
            used.set(messenger);
        }
        CountDownLatch done = new CountDownLatch(1);
        AtomicReference<String> failure = new AtomicReference<>();
        OutgoingMessageEventListener listener = new OutgoingMessageEventListener() {
            public void messageSendFailed(OutgoingMessageEvent event) {
                Throwable t = event.getFailure();
                failure.set(t == null ? "send failed (queue overflow)" : "send failed: " + oneLine(t));
                done.countDown();
            }

            public void messageSendSucceeded(OutgoingMessageEvent event) {
                done.countDown();
            }
        };
        try {
            messenger.sendMessage(msg, null, null, listener);
        } catch (UnsupportedOperationException legacy) {
            // Not a channel messenger from the endpoint service: fall back to a blocking send.
            try {
                messenger.sendMessageB(msg, null, null);
                return null;
            } catch (IOException ioe) {
                return "send failed: " + oneLine(ioe);
            }
        }
        try {
            if (!done.await(SEND_TIMEOUT_MS, TimeUnit.MILLISECONDS)) {
                return "send not confirmed within " + SEND_TIMEOUT_MS + " ms";
            }
        } catch (InterruptedException ie) {
            Thread.currentThread().interrupt();
            return "interrupted while sending";
        }
        return failure.get();
    }

    private Messenger resolve(EndpointAddress addr) throws InterruptedException {
        Messenger m = endpoint.getMessengerImmediate(addr, null);
        if (m == null) {
            return null;
        }
        m.resolve();
        m.waitState(Messenger.RESOLVED | Messenger.TERMINAL, SEND_TIMEOUT_MS);
        int state = m.getState();
        if ((state & Messenger.TERMINAL) != 0 || (state & Messenger.RESOLVED) == 0) {
            return null;
        }
        return m;
    }

    private Messenger replyMessenger(EndpointAddress addr) throws InterruptedException {
        Messenger m = replyMessengers.get(addr);
        if (m != null && (m.getState() & Messenger.USABLE) != 0) {
            return m;
        }
        m = resolve(addr);
        if (m != null) {
            replyMessengers.put(addr, m);
        } else {
            replyMessengers.remove(addr);
        }
        return m;
    }

    /** Reply address: same peer / physical address as the source, our service and param. */
    private static EndpointAddress replyTo(EndpointAddress src, String param) {
        return new EndpointAddress(src, SERVICE, param);
    }

    // ---------------------------------------------------------------- listeners

    private byte[] recvLine(Message message, EndpointAddress src, EndpointAddress dst) {
        MessageElement el = message.getMessageElement(NS, PAYLOAD);
        if (el == null) {
            out("RECV " + src + " " + dst + " -1 -");
            return null;
        }
        byte[] bytes = el.getBytes(false);
        out("RECV " + src + " " + dst + " " + bytes.length + " " + sha256(bytes));
        return bytes;
    }

    private void onSink(Message message, EndpointAddress src, EndpointAddress dst) {
        recvLine(message, src, dst);
    }

    private void onEcho(Message message, EndpointAddress src, EndpointAddress dst) {
        byte[] bytes = recvLine(message, src, dst);
        if (bytes == null) {
            out("ERROR echo: message has no juxta:payload element");
            return;
        }
        if (src == null) {
            out("ERROR echo: no source address");
            return;
        }
        EndpointAddress to = replyTo(src, "echo-reply");
        replies.execute(() -> {
            Message reply = new Message();
            reply.addMessageElement(NS, new ByteArrayMessageElement(PAYLOAD, null, bytes, null));
            String err = sendSync(to, reply);
            out(err == null ? "ECHOED " + bytes.length : "ERROR echo to " + to + ": " + err);
        });
    }

    private static final byte[] ACK_BYTE = {1};

    private void onAck(Message message, EndpointAddress src, EndpointAddress dst) {
        if (src == null) {
            return;
        }
        EndpointAddress to = replyTo(src, "ack-reply");
        replies.execute(() -> {
            try {
                Messenger m = replyMessenger(to);
                if (m == null) {
                    System.err.println("juxta-harness: ack: no messenger for " + to);
                    return;
                }
                Message reply = new Message();
                reply.addMessageElement(NS, new ByteArrayMessageElement(ACK, null, ACK_BYTE, null));
                m.sendMessageB(reply, null, null);
                acksSent.incrementAndGet();
            } catch (InterruptedException ie) {
                Thread.currentThread().interrupt();
            } catch (IOException | RuntimeException e) {
                System.err.println("juxta-harness: ack to " + to + " failed: " + oneLine(e));
                replyMessengers.remove(to);
            }
        });
    }

    // ---------------------------------------------------------------- helpers

    static String sha256(byte[] data) {
        try {
            return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(data));
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    static String oneLine(Throwable t) {
        String s = t.getClass().getSimpleName() + (t.getMessage() == null ? "" : ": " + t.getMessage());
        return s.replaceAll("[\\r\\n]+", " ");
    }

    private void shutdown(Path home, boolean tempHome) {
        // Never hang on exit: stopNetwork() has been seen to take a while.
        Thread watchdog = new Thread(() -> {
            try {
                Thread.sleep(15_000);
            } catch (InterruptedException ignored) {
                return;
            }
            System.err.println("juxta-harness: shutdown took too long, halting");
            Runtime.getRuntime().halt(0);
        }, "juxta-harness-exit-watchdog");
        watchdog.setDaemon(true);
        watchdog.start();

        replies.shutdownNow();
        if (pipes != null) {
            pipes.shutdown();
        }
        if (bench != null) {
            bench.shutdown();
        }
        for (Messenger m : replyMessengers.values()) {
            try {
                m.close();
            } catch (RuntimeException ignored) {
                // best effort
            }
        }
        try {
            manager.stopNetwork();
        } catch (RuntimeException e) {
            System.err.println("juxta-harness: stopNetwork failed: " + oneLine(e));
        }
        System.err.printf("juxta-harness: stopped (acks sent %d, ack-replies seen %d)%n",
                acksSent.get(), ackRepliesSeen.get());
        if (tempHome) {
            deleteTree(home);
        }
    }

    private static void deleteTree(Path root) {
        try (Stream<Path> walk = Files.walk(root)) {
            walk.sorted(Comparator.reverseOrder()).map(Path::toFile).forEach(File::delete);
        } catch (IOException ignored) {
            // temp dir, best effort
        }
    }
}
