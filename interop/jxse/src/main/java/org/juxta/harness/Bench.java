package org.juxta.harness;

import java.io.BufferedInputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.OutputStream;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

import net.jxta.endpoint.ByteArrayMessageElement;
import net.jxta.endpoint.EndpointAddress;
import net.jxta.endpoint.EndpointService;
import net.jxta.endpoint.Message;
import net.jxta.endpoint.MessageElement;
import net.jxta.endpoint.Messenger;
import net.jxta.endpoint.StringMessageElement;
import net.jxta.id.ID;
import net.jxta.id.IDFactory;
import net.jxta.peer.PeerID;
import net.jxta.peergroup.PeerGroup;
import net.jxta.pipe.InputPipe;
import net.jxta.pipe.OutputPipe;
import net.jxta.pipe.PipeID;
import net.jxta.pipe.PipeMsgEvent;
import net.jxta.pipe.PipeService;
import net.jxta.socket.JxtaServerSocket;
import net.jxta.socket.JxtaSocket;
import net.jxta.util.JxtaBiDiPipe;
import net.jxta.util.JxtaServerPipe;
import net.jxta.util.ServerPipeAcceptListener;

/**
 * Benchmark commands (see README.md, "Benchmark commands"): JXSE 2.7 measured with the
 * method of juxta-bench (message / 1-byte ack ping-pong, warm-up, timed runs, and one-way
 * throughput) on the endpoint, unicast pipe and JxtaSocket layers, timed here in Java with
 * System.nanoTime so the stdin/stdout control channel is never part of a measurement.
 *
 * One harness is the responder (BENCH_SERVE), another the client (BENCH_CLIENT, then
 * BENCH_PINGPONG / BENCH_PAIRS / BENCH_THROUGHPUT, each synchronous: one answer line).
 *
 * Wire formats (ours, on top of JXSE):
 * - endpoint: message to {responder}/JuxtaBench/ping with juxta:payload; the ack, element
 *   bench:ack (1 byte), goes to {client}/JuxtaBench/pong. Throughput messages go to
 *   .../JuxtaBench/tput; the end marker is a message there with bench:end = "<run> <count sent>",
 *   answered on pong with bench:done = "<run> <count received in this run> <ns since the run's
 *   last message arrived>" once the count is
 *   reached or nothing arrived for 2 s. Markers and answers can be lost, so the client resends
 *   the marker every 3 s; the responder answers each run once and repeats that answer.
 * - unicast pipe: the same messages on the input pipes ping and tput of the responder; acks
 *   and done answers come back on the client's input pipe ack.
 * - JxtaSocket: frames of 1 type byte ('P' ping, 'T' one-way, 'E' end), a 4-byte big-endian
 *   length and the payload. 'P' is answered with 1 byte, 'E' with the 8-byte count of 'T'
 *   frames since the previous 'E'.
 * - socket-unreliable (a JxtaSocket with stream=false: each write is one JXTASOC:data message,
 *   no jxtarel, so a message can be lost or overtaken): one connection per payload size. It
 *   opens with the frame 'S', length 4, the size (answered with 1 byte); from then on every
 *   ping is exactly `size` bytes, answered with 1 byte once that many bytes arrived (the order
 *   of the messages within a ping does not matter). A lost message leaves the ping without its
 *   ack: the client's read times out after REPLY_TIMEOUT_MS and the command fails (the
 *   connection is dropped, the next command opens a new one).
 * - bidi-pipe-reliable (a JxtaBiDiPipe connected with reliability on, jxtarel under it): the
 *   ping message on the pipe, the bench:ack message back on the same pipe.
 */
final class Bench {

    static final String SERVICE = "JuxtaBench";
    static final String NS = "bench";
    /** How long one ack, end-of-run answer or connect may take before the command fails. */
    static final long REPLY_TIMEOUT_MS = Long.getLong("juxta.harness.benchReplyTimeoutMs", 30_000L);
    /** End of a throughput run: answer once this long passes without a new message. */
    static final long STALL_MS = Long.getLong("juxta.harness.benchStallMs", 2_000L);
    /** Largest payload accepted (the payload is one byte array). */
    static final int MAX_SIZE = 64 << 20;

    private final PeerGroup group;
    private final EndpointService endpoint;
    private final PipeService pipeService;

    private final ExecutorService replies = Executors.newSingleThreadExecutor(daemon("juxta-bench-replies"));
    private final ExecutorService workers = Executors.newCachedThreadPool(daemon("juxta-bench-worker"));
    private final List<AutoCloseable> closeables = new CopyOnWriteArrayList<>();

    // ---- responder state
    private volatile EndpointAddress clientAddr;   // physical, tcp://...
    private volatile PeerID clientPeer;
    private volatile String ackPipeUrn;
    private volatile OutputPipe ackOut;
    private volatile Messenger pongMessenger;
    private final AtomicLong tputCount = new AtomicLong();
    private final AtomicLong tputBase = new AtomicLong();
    private volatile long lastTputNanos;
    /** End markers may be lost (pipes are unreliable) and are resent: answer each run once, cache it. */
    private long waitingRun = -1;
    private long answeredRun = -1;
    private long answeredCount;
    private long answeredLast;   // nanoTime of the run's last message, 0 if none came

    // ---- client state
    private volatile EndpointAddress respAddr;
    private volatile PeerID respPeer;
    private volatile PipeID pingPipe;
    private volatile PipeID tputPipe;
    private volatile PipeID sockPipe;
    private volatile PipeID bidiPipe;
    private volatile JxtaSocket uSocket;
    private volatile int uSocketSize = -1;
    private volatile JxtaBiDiPipe bidi;
    private final BlockingQueue<Long> acks = new LinkedBlockingQueue<>();
    /** End-of-run answers: {run, count}. */
    private final BlockingQueue<long[]> dones = new LinkedBlockingQueue<>();
    private final AtomicLong runIds = new AtomicLong();
    /** How long to wait for an end-of-run answer before sending the end marker again. */
    static final long RESEND_MS = Long.getLong("juxta.harness.benchResendMs", 3_000L);
    private final Map<String, Messenger> messengers = new ConcurrentHashMap<>();
    private final Map<String, OutputPipe> outPipes = new ConcurrentHashMap<>();
    private volatile JxtaSocket socket;
    private volatile DataInputStream socketIn;
    private volatile OutputStream socketOut;

    Bench(PeerGroup group) {
        this.group = group;
        this.endpoint = group.getEndpointService();
        this.pipeService = group.getPipeService();
    }

    private static java.util.concurrent.ThreadFactory daemon(String name) {
        AtomicInteger n = new AtomicInteger();
        return r -> {
            Thread t = new Thread(r, name + "-" + n.incrementAndGet());
            t.setDaemon(true);
            return t;
        };
    }

    /** Returns the answer line, or null if the command isn't ours. */
    String dispatch(String cmd, String[] parts) {
        try {
            switch (cmd) {
                case "BENCH_SERVE": return serve(parts);
                case "BENCH_CLIENT": return client(parts);
                case "BENCH_PINGPONG": return pingpong(parts);
                case "BENCH_PAIRS": return pairs(parts);
                case "BENCH_THROUGHPUT": return throughput(parts);
                default: return null;
            }
        } catch (Usage u) {
            return "ERROR " + cmd + " usage: " + u.getMessage();
        } catch (Exception e) {
            return "ERROR " + cmd + " " + Main.oneLine(e);
        }
    }

    private static final class Usage extends Exception {
        Usage(String msg) {
            super(msg);
        }
    }

    // ================================================================ responder

    /** BENCH_SERVE <client peer> <client tcp address>. */
    private String serve(String[] p) throws Exception {
        if (p.length != 3) {
            throw new Usage("BENCH_SERVE <client peer URN> <client tcp://host:port>");
        }
        clientPeer = peer(p[1]);
        clientAddr = new EndpointAddress(new EndpointAddress(p[2]), null, null);
        PipeID ping = IDFactory.newPipeID(group.getPeerGroupID());
        PipeID tput = IDFactory.newPipeID(group.getPeerGroupID());
        PipeID ack = IDFactory.newPipeID(group.getPeerGroupID());
        PipeID sock = IDFactory.newPipeID(group.getPeerGroupID());
        PipeID bidiId = IDFactory.newPipeID(group.getPeerGroupID());
        ackPipeUrn = ack.toString();

        endpoint.addIncomingMessageListener((m, s, d) -> onPing(m, false), SERVICE, "ping");
        endpoint.addIncomingMessageListener((m, s, d) -> onTput(m, false), SERVICE, "tput");
        closeables.add(() -> endpoint.removeIncomingMessageListener(SERVICE, "ping"));
        closeables.add(() -> endpoint.removeIncomingMessageListener(SERVICE, "tput"));

        InputPipe pin = pipeService.createInputPipe(Pipes.pipeAdv(ping, PipeService.UnicastType),
                (PipeMsgEvent ev) -> onPing(ev.getMessage(), true));
        closeables.add(pin::close);
        InputPipe tin = pipeService.createInputPipe(Pipes.pipeAdv(tput, PipeService.UnicastType),
                (PipeMsgEvent ev) -> onTput(ev.getMessage(), true));
        closeables.add(tin::close);

        JxtaServerSocket server = new JxtaServerSocket(group, Pipes.pipeAdv(sock, PipeService.UnicastType));
        server.setSoTimeout(0);
        closeables.add(server::close);
        Thread acceptor = new Thread(() -> acceptLoop(server), "juxta-bench-accept");
        acceptor.setDaemon(true);
        acceptor.start();

        JxtaServerPipe bidiServer = new JxtaServerPipe(group, Pipes.pipeAdv(bidiId, PipeService.UnicastType),
                new ServerPipeAcceptListener() {
                    public void pipeAccepted(JxtaBiDiPipe pipe) {
                        closeables.add(pipe::close);
                        pipe.setMessageListener((PipeMsgEvent ev) -> {
                            if (ev.getMessage() != null) {
                                replies.execute(() -> bidiAck(pipe));
                            }
                        });
                    }

                    public void serverPipeClosed() {
                        // nothing to do
                    }
                });
        closeables.add(bidiServer::close);
        return "BENCH_SERVING " + ping + " " + tput + " " + ack + " " + sock + " " + bidiId;
    }

    private void onPing(Message m, boolean pipe) {
        if (m == null) {
            return;
        }
        replies.execute(() -> reply(pipe, "ack", new byte[] {1}));
    }

    private void onTput(Message m, boolean pipe) {
        if (m == null) {
            return;
        }
        MessageElement end = m.getMessageElement(NS, "end");
        if (end == null) {
            tputCount.incrementAndGet();
            lastTputNanos = System.nanoTime();
            return;
        }
        long run;
        long want;
        try {
            String[] f = end.toString().trim().split("\\s+");
            run = Long.parseLong(f[0]);
            want = Long.parseLong(f[1]);
        } catch (RuntimeException bad) {
            Main.out("ERROR BENCH bad end marker: " + end);
            return;
        }
        long expected = want;
        synchronized (this) {
            if (run == answeredRun) {   // our answer was lost: send it again
                String again = doneText(run, answeredCount, answeredLast);
                replies.execute(() -> reply(pipe, "done", again.getBytes(StandardCharsets.UTF_8)));
                return;
            }
            if (run == waitingRun) {    // a resent marker while we still wait
                return;
            }
            waitingRun = run;
        }
        workers.execute(() -> {
            // Wait until the run's messages are all counted, or nothing new came for STALL_MS.
            while (true) {
                long got = tputCount.get() - tputBase.get();
                if (got >= expected || System.nanoTime() - lastTputNanos > TimeUnit.MILLISECONDS.toNanos(STALL_MS)) {
                    break;
                }
                try {
                    Thread.sleep(1);
                } catch (InterruptedException ie) {
                    return;
                }
            }
            long last = lastTputNanos;
            long now = tputCount.get();
            long got = now - tputBase.getAndSet(now);
            synchronized (this) {
                answeredRun = run;
                answeredCount = got;
                answeredLast = got > 0 ? last : 0;
                waitingRun = -1;
            }
            String answer = doneText(run, got, got > 0 ? last : 0);
            replies.execute(() -> reply(pipe, "done", answer.getBytes(StandardCharsets.UTF_8)));
        });
    }

    /**
     * "<run> <count> <idle ns>": idle is how long ago the run's last message arrived, so the
     * client can end its clock at that arrival instead of after our stall wait.
     */
    private static String doneText(long run, long count, long last) {
        return run + " " + count + " " + (last == 0 ? 0 : Math.max(0, System.nanoTime() - last));
    }

    /** Sends one bench:<name> element back to the client (pong listener or ack pipe). */
    private void reply(boolean pipe, String name, byte[] body) {
        Message r = new Message();
        r.addMessageElement(NS, new ByteArrayMessageElement(name, null, body, null));
        try {
            if (pipe) {
                OutputPipe op = ackOut;
                if (op == null || op.isClosed()) {
                    PipeID id = (PipeID) IDFactory.fromURI(URI.create(ackPipeUrn));
                    op = pipeService.createOutputPipe(Pipes.pipeAdv(id, PipeService.UnicastType),
                            Collections.singleton(clientPeer), REPLY_TIMEOUT_MS);
                    ackOut = op;
                    closeables.add(op::close);
                }
                sendPipe(op, r);
            } else {
                Messenger msgr = pongMessenger;
                if (msgr == null || (msgr.getState() & Messenger.USABLE) == 0) {
                    msgr = messenger(new EndpointAddress(clientAddr, SERVICE, "pong"));
                    pongMessenger = msgr;
                }
                msgr.sendMessageB(r, null, null);
            }
        } catch (Exception e) {
            if (pipe) {
                ackOut = null;
            } else {
                pongMessenger = null;
            }
            Main.out("ERROR BENCH reply " + (pipe ? "pipe" : "endpoint") + ": " + Main.oneLine(e));
        }
    }

    /** The responder's ack of a bidi pipe ping: bench:ack on the same pipe. */
    private static void bidiAck(JxtaBiDiPipe pipe) {
        Message r = new Message();
        r.addMessageElement(NS, new ByteArrayMessageElement("ack", null, new byte[] {1}, null));
        try {
            sendBidi(pipe, r);
        } catch (Exception e) {
            Main.out("ERROR BENCH reply bidi: " + Main.oneLine(e));
        }
    }

    /** JxtaBiDiPipe.sendMessage returns false while its queue is full: retry until REPLY_TIMEOUT_MS. */
    private static void sendBidi(JxtaBiDiPipe pipe, Message msg) throws IOException, InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(REPLY_TIMEOUT_MS);
        while (!pipe.sendMessage(msg)) {
            if (System.nanoTime() > deadline) {
                throw new IOException("bidi pipe refused the message for " + REPLY_TIMEOUT_MS + " ms");
            }
            Thread.sleep(1);
        }
    }

    private void acceptLoop(JxtaServerSocket server) {
        while (!server.isClosed()) {
            Socket s;
            try {
                s = server.accept();
            } catch (SocketTimeoutException again) {
                continue;
            } catch (IOException e) {
                return;
            }
            if (s != null) {
                closeables.add(s::close);
                workers.execute(() -> serveSocket(s));
            }
        }
    }

    private void serveSocket(Socket s) {
        try {
            s.setSoTimeout(0);   // a client may pause between commands for as long as it likes
            DataInputStream in = new DataInputStream(new BufferedInputStream(s.getInputStream(), 65536));
            DataOutputStream out = new DataOutputStream(s.getOutputStream());
            byte[] buf = new byte[0];
            long count = 0;
            while (true) {
                int type;
                try {
                    type = in.readUnsignedByte();
                } catch (EOFException eof) {
                    break;
                }
                int len = in.readInt();
                if (len < 0 || len > MAX_SIZE) {
                    throw new IOException("bad frame length " + len);
                }
                if (buf.length < len) {
                    buf = new byte[len];
                }
                in.readFully(buf, 0, len);
                switch (type) {
                    case 'P':
                        out.write(1);
                        out.flush();
                        break;
                    case 'T':
                        count++;
                        break;
                    case 'E':
                        out.writeLong(count);
                        out.flush();
                        count = 0;
                        break;
                    case 'S':
                        // socket-unreliable: fixed-size pings from now on (see the class comment).
                        if (len != 4) {
                            throw new IOException("bad size frame length " + len);
                        }
                        int size = ((buf[0] & 0xff) << 24) | ((buf[1] & 0xff) << 16) | ((buf[2] & 0xff) << 8)
                                | (buf[3] & 0xff);
                        if (size < 0 || size > MAX_SIZE) {
                            throw new IOException("bad ping size " + size);
                        }
                        out.write(1);
                        out.flush();
                        serveFixedPings(in, out, size);
                        return;
                    default:
                        throw new IOException("bad frame type " + type);
                }
            }
        } catch (Exception e) {
            System.err.println("juxta-bench: socket ended: " + Main.oneLine(e));
        } finally {
            try {
                s.close();
            } catch (Exception ignored) {
                // best effort
            }
        }
    }

    /** socket-unreliable: every `size` bytes read (in whatever order they came) get a 1-byte ack. */
    private static void serveFixedPings(DataInputStream in, DataOutputStream out, int size) throws IOException {
        byte[] buf = new byte[Math.max(1, Math.min(size, 1 << 20))];
        while (true) {
            int left = size;
            while (left > 0) {
                int n = in.read(buf, 0, Math.min(left, buf.length));
                if (n < 0) {
                    if (left == size) {
                        return;   // the client closed between pings
                    }
                    throw new EOFException("socket ended inside a ping");
                }
                left -= n;
            }
            out.write(1);
            out.flush();
        }
    }

    // ================================================================ client

    /**
     * BENCH_CLIENT <responder peer> <responder tcp address> <ping pipe> <tput pipe> <ack pipe> <socket pipe>
     * <bidi pipe>.
     */
    private String client(String[] p) throws Exception {
        if (p.length != 8) {
            throw new Usage("BENCH_CLIENT <responder peer> <responder tcp://host:port> <ping pipe> <tput pipe>"
                    + " <ack pipe> <socket pipe> <bidi pipe>");
        }
        respPeer = peer(p[1]);
        respAddr = new EndpointAddress(new EndpointAddress(p[2]), null, null);
        pingPipe = pipe(p[3]);
        tputPipe = pipe(p[4]);
        PipeID ack = pipe(p[5]);
        sockPipe = pipe(p[6]);
        bidiPipe = pipe(p[7]);
        endpoint.addIncomingMessageListener((m, s, d) -> onReply(m), SERVICE, "pong");
        closeables.add(() -> endpoint.removeIncomingMessageListener(SERVICE, "pong"));
        InputPipe in = pipeService.createInputPipe(Pipes.pipeAdv(ack, PipeService.UnicastType),
                (PipeMsgEvent ev) -> onReply(ev.getMessage()));
        closeables.add(in::close);
        return "BENCH_CLIENT_READY";
    }

    private void onReply(Message m) {
        if (m == null) {
            return;
        }
        long now = System.nanoTime();
        MessageElement done = m.getMessageElement(NS, "done");
        if (done != null) {
            try {
                String[] f = done.toString().trim().split("\\s+");
                dones.add(new long[] {Long.parseLong(f[0]), Long.parseLong(f[1]), Long.parseLong(f[2])});
            } catch (RuntimeException bad) {
                Main.out("ERROR BENCH bad end-of-run answer: " + done);
            }
            return;
        }
        if (m.getMessageElement(NS, "ack") != null) {
            acks.add(now);
        }
    }

    /** One layer's sending side, connected on first use. */
    private interface Sender {
        /** Sends one ping and waits for its ack. */
        void pair(byte[] payload) throws Exception;

        /** Sends one one-way message (throughput). */
        void oneWay(byte[] payload) throws Exception;

        /**
         * Ends a throughput run of `sent` messages; returns {how many the responder counted,
         * how long before its answer the last one arrived (ns)}.
         */
        long[] end(long sent) throws Exception;
    }

    /** The sender of `layer`; `size` is the payload size of the pings to come. */
    private Sender sender(String layer, int size) throws Exception {
        switch (layer) {
            case "endpoint": return endpointSender();
            case "unicast-pipe": return pipeSender();
            case "socket": return socketSender();
            case "socket-unreliable": return unreliableSocketSender(size);
            case "bidi-pipe-reliable": return reliableBidiSender();
            default: throw new Usage("layer must be endpoint, unicast-pipe, socket, socket-unreliable or"
                    + " bidi-pipe-reliable, not " + layer);
        }
    }

    /** Layers measured by the ping-pong only (BENCH_THROUGHPUT refuses them). */
    private static boolean pingOnly(String layer) {
        return layer.equals("socket-unreliable") || layer.equals("bidi-pipe-reliable");
    }

    /**
     * socket-unreliable: a JxtaSocket with stream=false, one per ping size (see the class
     * comment). A ping without its ack within REPLY_TIMEOUT_MS (a lost message) fails the
     * command and drops the connection.
     */
    private Sender unreliableSocketSender(int size) throws Exception {
        needClient();
        if (uSocket == null || uSocket.isClosed() || uSocketSize != size) {
            dropUnreliableSocket();
            JxtaSocket s = new JxtaSocket(group, respPeer, Pipes.pipeAdv(sockPipe, PipeService.UnicastType),
                    (int) REPLY_TIMEOUT_MS, false);
            s.setSoTimeout((int) REPLY_TIMEOUT_MS);
            closeables.add(s::close);
            OutputStream o = s.getOutputStream();
            o.write(new byte[] {'S', 0, 0, 0, 4, (byte) (size >>> 24), (byte) (size >>> 16), (byte) (size >>> 8),
                    (byte) size});
            o.flush();
            try {
                if (s.getInputStream().read() < 0) {
                    throw new EOFException("unreliable socket closed by the responder");
                }
            } catch (IOException e) {
                closeQuietly(s);
                throw new IOException("unreliable socket: no answer to the size frame: " + Main.oneLine(e), e);
            }
            uSocket = s;
            uSocketSize = size;
        }
        JxtaSocket s = uSocket;
        java.io.InputStream in = s.getInputStream();
        OutputStream out = s.getOutputStream();
        return new Sender() {
            public void pair(byte[] payload) throws Exception {
                try {
                    out.write(payload);
                    out.flush();
                    if (in.read() < 0) {
                        throw new EOFException("unreliable socket closed by the responder");
                    }
                } catch (SocketTimeoutException lost) {
                    dropUnreliableSocket();
                    throw new IOException("unreliable socket: no ack within " + REPLY_TIMEOUT_MS
                            + " ms (a message of the ping or its ack was lost)", lost);
                } catch (IOException e) {
                    dropUnreliableSocket();
                    throw e;
                }
            }

            public void oneWay(byte[] payload) throws Exception {
                throw new Usage("socket-unreliable is measured by the ping-pong only");
            }

            public long[] end(long sent) throws Exception {
                throw new Usage("socket-unreliable is measured by the ping-pong only");
            }
        };
    }

    private void dropUnreliableSocket() {
        JxtaSocket s = uSocket;
        uSocket = null;
        uSocketSize = -1;
        if (s != null) {
            // A close may wait for the other side: off the command's thread.
            workers.execute(() -> closeQuietly(s));
        }
    }

    private static void closeQuietly(Socket s) {
        try {
            s.close();
        } catch (Exception ignored) {
            // best effort
        }
    }

    /** bidi-pipe-reliable: a JxtaBiDiPipe with reliability on; acks come back on it. */
    private Sender reliableBidiSender() throws Exception {
        needClient();
        JxtaBiDiPipe b = bidi;
        if (b == null || !b.isBound()) {
            b = new JxtaBiDiPipe();
            b.connect(group, respPeer, Pipes.pipeAdv(bidiPipe, PipeService.UnicastType), (int) REPLY_TIMEOUT_MS,
                    (PipeMsgEvent ev) -> onReply(ev.getMessage()), true);
            closeables.add(b::close);
            bidi = b;
        }
        JxtaBiDiPipe pipe = b;
        return new Sender() {
            public void pair(byte[] payload) throws Exception {
                sendBidi(pipe, Pipes.payloadMessage(payload));
                awaitAck();
            }

            public void oneWay(byte[] payload) throws Exception {
                throw new Usage("bidi-pipe-reliable is measured by the ping-pong only");
            }

            public long[] end(long sent) throws Exception {
                throw new Usage("bidi-pipe-reliable is measured by the ping-pong only");
            }
        };
    }

    private void needClient() throws Usage {
        if (respPeer == null) {
            throw new Usage("run BENCH_CLIENT first");
        }
    }

    private long awaitAck() throws Exception {
        Long t = acks.poll(REPLY_TIMEOUT_MS, TimeUnit.MILLISECONDS);
        if (t == null) {
            throw new IOException("no ack within " + REPLY_TIMEOUT_MS + " ms");
        }
        return t;
    }

    /** The end of a message run of an unreliable layer: (re)send the end marker until answered. */
    private interface EndSender {
        void send(Message m) throws Exception;
    }

    private long[] endRun(long sent, EndSender how) throws Exception {
        long run = runIds.incrementAndGet();
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(REPLY_TIMEOUT_MS + STALL_MS);
        while (System.nanoTime() < deadline) {
            how.send(endMessage(run, sent));
            long resend = Math.min(deadline, System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(RESEND_MS));
            long left;
            while ((left = resend - System.nanoTime()) > 0) {
                long[] d = dones.poll(left, TimeUnit.NANOSECONDS);
                if (d != null && d[0] == run) {
                    return new long[] {d[1], d[2]};
                }
            }
        }
        throw new IOException("no end-of-run answer within " + (REPLY_TIMEOUT_MS + STALL_MS) + " ms");
    }

    private Sender endpointSender() throws Exception {
        needClient();
        Messenger ping = cachedMessenger(new EndpointAddress(respAddr, SERVICE, "ping"));
        Messenger tput = cachedMessenger(new EndpointAddress(respAddr, SERVICE, "tput"));
        return new Sender() {
            public void pair(byte[] payload) throws Exception {
                ping.sendMessageB(Pipes.payloadMessage(payload), null, null);
                awaitAck();
            }

            public void oneWay(byte[] payload) throws Exception {
                // Non-blocking, as fast as JXSE's messenger queue takes them (sendMessageB
                // would wait for each message to be written: one message in flight).
                Message m = Pipes.payloadMessage(payload);
                long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(REPLY_TIMEOUT_MS);
                while (!tput.sendMessageN(m, null, null)) {
                    if (System.nanoTime() > deadline) {
                        throw new IOException("endpoint messenger refused messages for " + REPLY_TIMEOUT_MS + " ms");
                    }
                    Thread.sleep(1);
                }
            }

            public long[] end(long sent) throws Exception {
                return endRun(sent, m -> tput.sendMessageB(m, null, null));
            }
        };
    }

    private Sender pipeSender() throws Exception {
        needClient();
        OutputPipe ping = cachedPipe(pingPipe);
        OutputPipe tput = cachedPipe(tputPipe);
        return new Sender() {
            public void pair(byte[] payload) throws Exception {
                sendPipe(ping, Pipes.payloadMessage(payload));
                awaitAck();
            }

            public void oneWay(byte[] payload) throws Exception {
                sendPipe(tput, Pipes.payloadMessage(payload));
            }

            public long[] end(long sent) throws Exception {
                return endRun(sent, m -> sendPipe(tput, m));
            }
        };
    }

    private Sender socketSender() throws Exception {
        needClient();
        if (socket == null || socket.isClosed()) {
            JxtaSocket s = new JxtaSocket(group, respPeer, Pipes.pipeAdv(sockPipe, PipeService.UnicastType),
                    (int) REPLY_TIMEOUT_MS, true);
            s.setSoTimeout((int) REPLY_TIMEOUT_MS);
            closeables.add(s::close);
            socketIn = new DataInputStream(s.getInputStream());
            socketOut = s.getOutputStream();
            socket = s;
        }
        DataInputStream in = socketIn;
        OutputStream out = socketOut;
        return new Sender() {
            byte[] frame = new byte[0];

            private void write(char type, byte[] payload) throws IOException {
                int n = payload.length + 5;
                if (frame.length != n) {
                    frame = new byte[n];
                    System.arraycopy(payload, 0, frame, 5, payload.length);
                }
                frame[0] = (byte) type;
                frame[1] = (byte) (payload.length >>> 24);
                frame[2] = (byte) (payload.length >>> 16);
                frame[3] = (byte) (payload.length >>> 8);
                frame[4] = (byte) payload.length;
                out.write(frame);
                out.flush();
            }

            public void pair(byte[] payload) throws Exception {
                write('P', payload);
                if (in.read() < 0) {
                    throw new EOFException("socket closed by the responder");
                }
            }

            public void oneWay(byte[] payload) throws Exception {
                write('T', payload);
            }

            public long[] end(long sent) throws Exception {
                out.write(new byte[] {'E', 0, 0, 0, 0});
                out.flush();
                return new long[] {in.readLong(), 0};
            }
        };
    }

    private Messenger cachedMessenger(EndpointAddress addr) throws Exception {
        String key = addr.toString();
        Messenger m = messengers.get(key);
        if (m == null || (m.getState() & Messenger.USABLE) == 0) {
            m = messenger(addr);
            messengers.put(key, m);
        }
        return m;
    }

    private OutputPipe cachedPipe(PipeID id) throws Exception {
        String key = id.toString();
        OutputPipe op = outPipes.get(key);
        if (op == null || op.isClosed()) {
            op = pipeService.createOutputPipe(Pipes.pipeAdv(id, PipeService.UnicastType),
                    Collections.singleton(respPeer), REPLY_TIMEOUT_MS);
            outPipes.put(key, op);
            closeables.add(op::close);
        }
        return op;
    }

    private static Message endMessage(long run, long sent) {
        Message m = new Message();
        m.addMessageElement(NS, new StringMessageElement("end", run + " " + sent, null));
        return m;
    }

    /**
     * BENCH_PINGPONG <layer> <size> <warmup> <runs> <pairs> <budget ms>: exactly `warmup`
     * warm-up pairs, then `runs` timed runs of `pairs` pairs each. With a budget of 0 (what
     * juxta-bench sends: every implementation gets the same samples) every run completes;
     * a positive budget ends a run early once it used budget/runs ms (at least 3 pairs) and
     * stops the warm-up after a quarter of it (the old method, kept for manual runs).
     * Answer: BENCH_PINGPONG <layer> <size> <warm-up pairs done> <run1 µs,µs,...;run2 ...>.
     */
    private String pingpong(String[] p) throws Exception {
        if (p.length != 7) {
            throw new Usage("BENCH_PINGPONG <layer> <size> <warmup> <runs> <pairs> <budget ms>");
        }
        String layer = p[1];
        int size = intArg(p[2], MAX_SIZE);
        int warmup = intArg(p[3], Integer.MAX_VALUE);
        int runs = Math.max(1, intArg(p[4], 10_000));
        int pairs = Math.max(1, intArg(p[5], Integer.MAX_VALUE));
        long budgetMs = intArg(p[6], Integer.MAX_VALUE);
        boolean bounded = budgetMs > 0;
        long budget = TimeUnit.MILLISECONDS.toNanos(Math.max(1, budgetMs));
        Sender s = sender(layer, size);
        acks.clear();
        byte[] payload = Main.pattern(size);
        long warmEnd = System.nanoTime() + budget / 4;
        int warmed = 0;
        while (warmed < warmup && (!bounded || warmed < 3 || System.nanoTime() < warmEnd)) {
            s.pair(payload);
            warmed++;
        }
        StringBuilder sb = new StringBuilder("BENCH_PINGPONG ").append(layer).append(' ').append(size)
                .append(' ').append(warmed).append(' ');
        long perRun = budget / runs;
        long[] samples = new long[pairs];
        for (int r = 0; r < runs; r++) {
            if (r > 0) {
                sb.append(';');
            }
            long runEnd = System.nanoTime() + perRun;
            int done = 0;
            // Timestamps only inside the loop: formatting waits until the run ends.
            for (int i = 0; i < pairs; i++) {
                long t0 = System.nanoTime();
                s.pair(payload);
                long t1 = System.nanoTime();
                samples[done++] = t1 - t0;
                if (bounded && i >= 2 && t1 > runEnd) {
                    break;
                }
            }
            for (int i = 0; i < done; i++) {
                if (i > 0) {
                    sb.append(',');
                }
                sb.append(String.format(java.util.Locale.ROOT, "%.1f", samples[i] / 1000.0));
            }
        }
        return sb.toString();
    }

    /** BENCH_PAIRS <layer> <size> <count>: count untimed pairs (the caller counts wire bytes). */
    private String pairs(String[] p) throws Exception {
        if (p.length != 4) {
            throw new Usage("BENCH_PAIRS <layer> <size> <count>");
        }
        int size = intArg(p[2], MAX_SIZE);
        Sender s = sender(p[1], size);
        int count = intArg(p[3], Integer.MAX_VALUE);
        acks.clear();
        byte[] payload = Main.pattern(size);
        for (int i = 0; i < count; i++) {
            s.pair(payload);
        }
        return "BENCH_PAIRS_DONE " + p[1] + " " + size + " " + count;
    }

    /**
     * BENCH_THROUGHPUT <layer> <size> <duration ms> <max count>: sends one-way messages as fast
     * as the layer takes them, for the duration or up to max count, then the end marker; the
     * run is timed from the first send until the responder's count is back.
     * Answer: BENCH_THROUGHPUT <layer> <size> <sent> <received> <elapsed ns>.
     */
    private String throughput(String[] p) throws Exception {
        if (p.length != 5) {
            throw new Usage("BENCH_THROUGHPUT <layer> <size> <duration ms> <max count>");
        }
        String layer = p[1];
        int size = intArg(p[2], MAX_SIZE);
        long duration = TimeUnit.MILLISECONDS.toNanos(intArg(p[3], Integer.MAX_VALUE));
        long max = Math.max(1, Long.parseLong(p[4]));
        if (pingOnly(layer)) {
            throw new Usage(layer + " is measured by the ping-pong only");
        }
        Sender s = sender(layer, size);
        dones.clear();
        byte[] payload = Main.pattern(size);
        long t0 = System.nanoTime();
        long stop = t0 + duration;
        long sent = 0;
        do {
            s.oneWay(payload);
            sent++;
        } while (sent < max && System.nanoTime() < stop);
        long[] end = s.end(sent);
        long got = end[0];
        // Until the last message arrived (plus the answer's way back), not the stall wait.
        long elapsed = Math.max(1, System.nanoTime() - t0 - end[1]);
        return "BENCH_THROUGHPUT " + layer + " " + size + " " + sent + " " + got + " " + elapsed;
    }

    // ================================================================ helpers

    private Messenger messenger(EndpointAddress addr) throws Exception {
        Messenger m = endpoint.getMessengerImmediate(addr, null);
        if (m == null) {
            throw new IOException("no messenger for " + addr);
        }
        m.resolve();
        m.waitState(Messenger.RESOLVED | Messenger.TERMINAL, REPLY_TIMEOUT_MS);
        int st = m.getState();
        if ((st & Messenger.TERMINAL) != 0 || (st & Messenger.RESOLVED) == 0) {
            throw new IOException("messenger for " + addr + " did not resolve within " + REPLY_TIMEOUT_MS + " ms");
        }
        return m;
    }

    /** OutputPipe.send returns false while its queue is full: retry until REPLY_TIMEOUT_MS. */
    private static void sendPipe(OutputPipe op, Message msg) throws IOException, InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(REPLY_TIMEOUT_MS);
        while (!op.send(msg)) {
            if (System.nanoTime() > deadline) {
                throw new IOException("output pipe queue full for " + REPLY_TIMEOUT_MS + " ms");
            }
            Thread.sleep(1);
        }
    }

    private static int intArg(String s, int max) throws Usage {
        try {
            int v = Integer.parseInt(s);
            if (v < 0 || v > max) {
                throw new Usage("out of range 0.." + max + ": " + s);
            }
            return v;
        } catch (NumberFormatException bad) {
            throw new Usage("not a number: " + s);
        }
    }

    private static PeerID peer(String urn) throws Usage {
        if (urn.startsWith("jxta://")) {
            urn = "urn:jxta:" + urn.substring("jxta://".length());
        }
        try {
            ID id = IDFactory.fromURI(URI.create(urn));
            if (id instanceof PeerID) {
                return (PeerID) id;
            }
        } catch (Exception bad) {
            // fall through
        }
        throw new Usage("not a peer ID: " + urn);
    }

    private static PipeID pipe(String urn) throws Usage {
        try {
            ID id = IDFactory.fromURI(URI.create(urn));
            if (id instanceof PipeID) {
                return (PipeID) id;
            }
        } catch (Exception bad) {
            // fall through
        }
        throw new Usage("not a pipe ID: " + urn);
    }

    /** Close everything (best effort, bounded: called before stopNetwork). */
    void shutdown() {
        replies.shutdownNow();
        workers.shutdownNow();
        List<AutoCloseable> all = new ArrayList<>(closeables);
        for (Messenger m : messengers.values()) {
            all.add(m::close);
        }
        closeables.clear();
        Thread closer = new Thread(() -> {
            for (AutoCloseable c : all) {
                try {
                    c.close();
                } catch (Exception ignored) {
                    // best effort
                }
            }
        }, "juxta-bench-closer");
        closer.setDaemon(true);
        closer.start();
        try {
            closer.join(3_000);
        } catch (InterruptedException ie) {
            Thread.currentThread().interrupt();
        }
    }
}
