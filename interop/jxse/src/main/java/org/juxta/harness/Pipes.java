package org.juxta.harness;

import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.net.URI;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HexFormat;
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
import java.util.logging.Level;
import java.util.logging.Logger;

import net.jxta.document.AdvertisementFactory;
import net.jxta.endpoint.ByteArrayMessageElement;
import net.jxta.endpoint.Message;
import net.jxta.endpoint.MessageElement;
import net.jxta.id.ID;
import net.jxta.id.IDFactory;
import net.jxta.peer.PeerID;
import net.jxta.peergroup.PeerGroup;
import net.jxta.pipe.InputPipe;
import net.jxta.pipe.OutputPipe;
import net.jxta.pipe.PipeID;
import net.jxta.pipe.PipeMsgEvent;
import net.jxta.pipe.PipeService;
import net.jxta.protocol.PipeAdvertisement;
import net.jxta.socket.JxtaServerSocket;
import net.jxta.socket.JxtaSocket;
import net.jxta.util.JxtaBiDiPipe;
import net.jxta.util.JxtaServerPipe;
import net.jxta.util.ServerPipeAcceptListener;

/**
 * Pipe, JxtaSocket and JxtaBiDiPipe commands of the harness (see README.md, "Pipes, sockets
 * and bidi pipes"). Everything lives in the NetPeerGroup.
 *
 * Long-running work (socket and bidi clients, accepted sockets) runs on daemon worker
 * threads, so the stdin loop stays responsive; their answer lines are printed when they end.
 */
final class Pipes {

    private static final Logger LOG = Logger.getLogger(Pipes.class.getName());

    /** Pipe resolution (createOutputPipe), JxtaSocket and JxtaBiDiPipe connect timeout. */
    static final int CONNECT_TIMEOUT_MS = Integer.getInteger("juxta.harness.connectTimeoutMs", 30_000);
    /**
     * JxtaSocket read timeout (setSoTimeout on both ends). JXSE's own default is 100 ms, which
     * its reliable input stream turns into "Read timeout reached" after about 1 s of silence.
     * In 2.7 setSoTimeout also sets the close timeout (close waits max(15 s, this)).
     * A negative value leaves JXSE's default alone.
     */
    static final int SOCKET_TIMEOUT_MS = Integer.getInteger("juxta.harness.socketTimeoutMs", 60_000);
    /**
     * SOCKET_CONNECT pauses this long between reading the last reply byte and close(). JXSE's
     * server answers a close with closeACK only if its retransmit queue is already empty, i.e.
     * only if it has processed the ACK for our last consumed block; the ACK and the close are
     * sent back to back and the receiver may handle them out of order, in which case no
     * closeACK ever comes (close fails after max(15 s, soTimeout)). 0 turns the pause off.
     */
    static final long CLOSE_DELAY_MS = Long.getLong("juxta.harness.closeDelayMs", 250L);
    /** How long BIDI_CONNECT waits for the echoes (after the last send). */
    static final long ECHO_TIMEOUT_MS = Long.getLong("juxta.harness.echoTimeoutMs", 30_000L);
    /** How long to retry a send that JXSE refused because its queue was full. */
    static final long QUEUE_TIMEOUT_MS = Long.getLong("juxta.harness.queueTimeoutMs", 30_000L);
    /** Largest length prefix SOCKET_SERVE accepts. */
    static final long MAX_SOCKET_PAYLOAD = 1L << 31;

    static final String PIPE_NAME = "juxta-harness";
    private static final int CHUNK = 64 * 1024;   // multiple of 256: the pattern repeats every 256 bytes
    private static final byte[] PATTERN_CHUNK = Main.pattern(CHUNK);

    private final PeerGroup group;
    private final PipeService pipeService;
    private final String peerId;

    /** Everything bound with *_LISTEN / *_SERVE, by pipe URN, so PIPE_CLOSE and shutdown can close it. */
    private final Map<String, AutoCloseable> bound = new ConcurrentHashMap<>();
    private final List<AutoCloseable> accepted = new CopyOnWriteArrayList<>();
    private final Map<String, OutputPipe> echoPipes = new ConcurrentHashMap<>();

    private final ExecutorService workers = Executors.newCachedThreadPool(daemon("juxta-harness-worker"));
    /** Echo replies (pipe echo, bidi echo) leave here, in arrival order, off JXSE's threads. */
    private final ExecutorService echoes = Executors.newSingleThreadExecutor(daemon("juxta-harness-echo"));

    Pipes(PeerGroup group) {
        this.group = group;
        this.pipeService = group.getPipeService();
        this.peerId = group.getPeerID().toString();
    }

    private static java.util.concurrent.ThreadFactory daemon(String name) {
        AtomicInteger n = new AtomicInteger();
        return r -> {
            Thread t = new Thread(r, name + "-" + n.incrementAndGet());
            t.setDaemon(true);
            return t;
        };
    }

    /** dispatch() result for commands whose answer a worker thread prints later. */
    static final String ASYNC = "";

    /** Returns the answer line, ASYNC, or null if the command isn't ours. */
    String dispatch(String cmd, String[] parts) {
        switch (cmd) {
            case "PIPE_NEW": return pipeNew(parts);
            case "PIPE_LISTEN": return pipeListen(parts);
            case "PIPE_LISTEN_ECHO": return pipeListenEcho(parts);
            case "PIPE_SEND": return pipeSend(parts);
            case "PIPE_CLOSE": return pipeClose(parts);
            case "SOCKET_SERVE": return socketServe(parts);
            case "SOCKET_CONNECT": return socketConnect(parts);
            case "BIDI_SERVE": return bidiServe(parts);
            case "BIDI_CONNECT": return bidiConnect(parts);
            default: return null;
        }
    }

    // ---------------------------------------------------------------- argument parsing

    private static final class Usage extends Exception {
        Usage(String msg) {
            super(msg);
        }
    }

    private PipeID pipeId(String urn) throws Usage {
        try {
            ID id = IDFactory.fromURI(URI.create(urn));
            if (!(id instanceof PipeID)) {
                throw new Usage("not a pipe ID: " + urn);
            }
            return (PipeID) id;
        } catch (Usage u) {
            throw u;
        } catch (Exception bad) {
            throw new Usage("bad pipe ID " + urn + ": " + Main.oneLine(bad));
        }
    }

    private static PeerID peerIdArg(String urn) throws Usage {
        if (urn.startsWith("jxta://")) {
            urn = "urn:jxta:" + urn.substring("jxta://".length());
        }
        try {
            ID id = IDFactory.fromURI(URI.create(urn));
            if (!(id instanceof PeerID)) {
                throw new Usage("not a peer ID: " + urn);
            }
            return (PeerID) id;
        } catch (Usage u) {
            throw u;
        } catch (Exception bad) {
            throw new Usage("bad peer ID " + urn + ": " + Main.oneLine(bad));
        }
    }

    private static long sizeArg(String s, long max) throws Usage {
        try {
            long v = Long.parseLong(s);
            if (v < 0 || v > max) {
                throw new Usage("size out of range 0.." + max + ": " + s);
            }
            return v;
        } catch (NumberFormatException bad) {
            throw new Usage("not a number: " + s);
        }
    }

    private static String pipeType(String arg) throws Usage {
        switch (arg.toLowerCase()) {
            case "unicast": return PipeService.UnicastType;
            case "propagate": return PipeService.PropagateType;
            default: throw new Usage("expected unicast or propagate: " + arg);
        }
    }

    static PipeAdvertisement pipeAdv(PipeID id, String type) {
        PipeAdvertisement adv = (PipeAdvertisement)
                AdvertisementFactory.newAdvertisement(PipeAdvertisement.getAdvertisementType());
        adv.setPipeID(id);
        adv.setType(type);
        adv.setName(PIPE_NAME);
        return adv;
    }

    private static String err(String what, Throwable t) {
        return "ERROR " + what + ": " + Main.oneLine(t);
    }

    // ---------------------------------------------------------------- payload helpers

    /** The element a pipe/bidi receiver reports: see README ("which element is reported"). */
    static final class Picked {
        final String namespace;
        final MessageElement element;

        Picked(String namespace, MessageElement element) {
            this.namespace = namespace;
            this.element = element;
        }
    }

    /**
     * The first element, in message order, whose namespace is not "jxta" and whose content is
     * not empty. Null if there is none.
     */
    static Picked pick(Message msg) {
        Message.ElementIterator it = msg.getMessageElements();
        while (it.hasNext()) {
            MessageElement el = it.next();
            String ns = it.getNamespace();
            if ("jxta".equals(ns)) {
                continue;
            }
            if (el.getByteLength() <= 0) {
                continue;
            }
            return new Picked(ns, el);
        }
        return null;
    }

    /** "<len> <sha>" of the picked element, or "-1 -". */
    static String describe(Picked p) {
        if (p == null) {
            return "-1 -";
        }
        MessageDigest md = sha();
        long n = 0;
        try (InputStream in = p.element.getStream()) {
            byte[] buf = new byte[CHUNK];
            int r;
            while ((r = in.read(buf)) > 0) {
                md.update(buf, 0, r);
                n += r;
            }
        } catch (IOException e) {
            // Element streams are in memory; fall back to the bytes.
            byte[] b = p.element.getBytes(false);
            return b.length + " " + Main.sha256(b);
        }
        return n + " " + hex(md);
    }

    private static String summary(Message msg) {
        StringBuilder sb = new StringBuilder();
        Message.ElementIterator it = msg.getMessageElements();
        while (it.hasNext()) {
            MessageElement el = it.next();
            if (sb.length() > 0) {
                sb.append(", ");
            }
            sb.append(it.getNamespace()).append(':').append(el.getElementName())
                    .append('(').append(el.getMimeType()).append(", ").append(el.getByteLength()).append(')');
        }
        return sb.toString();
    }

    static MessageDigest sha() {
        try {
            return MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    static String hex(MessageDigest md) {
        return HexFormat.of().formatHex(md.digest());
    }

    /** A message with one juxta:payload element of the pattern (same as SEND). */
    static Message payloadMessage(byte[] payload) {
        Message msg = new Message();
        msg.addMessageElement(Main.NS, new ByteArrayMessageElement(Main.PAYLOAD, null, payload, null));
        return msg;
    }

    /** Write `size` pattern bytes (byte i = (i*31+7) & 0xff) to out, hashing them into md. */
    static void writePattern(OutputStream out, long size, MessageDigest md) throws IOException {
        long left = size;
        while (left > 0) {
            int n = (int) Math.min(CHUNK, left);
            out.write(PATTERN_CHUNK, 0, n);   // every chunk starts at a multiple of 256
            md.update(PATTERN_CHUNK, 0, n);
            left -= n;
        }
    }

    /** Read exactly n bytes into md. Throws EOFException (with the count) if the stream ends first. */
    static void readExactly(InputStream in, long n, MessageDigest md) throws IOException {
        byte[] buf = new byte[CHUNK];
        long got = 0;
        while (got < n) {
            int r = in.read(buf, 0, (int) Math.min(buf.length, n - got));
            if (r < 0) {
                throw new EOFException("EOF after " + got + " of " + n + " bytes");
            }
            md.update(buf, 0, r);
            got += r;
        }
    }

    // ---------------------------------------------------------------- plain pipes

    private String pipeNew(String[] parts) {
        if (parts.length != 1) {
            return "ERROR usage: PIPE_NEW";
        }
        return "PIPE " + IDFactory.newPipeID(group.getPeerGroupID()).toString();
    }

    private String pipeListen(String[] parts) {
        if (parts.length != 2 && parts.length != 3) {
            return "ERROR usage: PIPE_LISTEN <pipe URN> [unicast|propagate]";
        }
        String type;
        try {
            type = parts.length == 3 ? pipeType(parts[2]) : PipeService.UnicastType;
        } catch (Usage u) {
            return "ERROR usage: PIPE_LISTEN <pipe URN> [unicast|propagate]";
        }
        return listen(parts[1], type, null, null);
    }

    private String pipeListenEcho(String[] parts) {
        if (parts.length != 4) {
            return "ERROR usage: PIPE_LISTEN_ECHO <pipe URN> <reply pipe URN> <reply peer URN>";
        }
        PipeID replyPipe;
        PeerID replyPeer;
        try {
            replyPipe = pipeId(parts[2]);
            replyPeer = peerIdArg(parts[3]);
        } catch (Usage u) {
            return "ERROR " + u.getMessage();
        }
        return listen(parts[1], PipeService.UnicastType, replyPipe, replyPeer);
    }

    private String listen(String urn, String type, PipeID replyPipe, PeerID replyPeer) {
        PipeID id;
        try {
            id = pipeId(urn);
        } catch (Usage u) {
            return "ERROR " + u.getMessage();
        }
        String key = id.toString();
        if (bound.containsKey(key)) {
            return "ERROR already bound here: " + key;
        }
        try {
            InputPipe in = pipeService.createInputPipe(pipeAdv(id, type), (PipeMsgEvent ev) -> {
                Message msg = ev.getMessage();
                if (msg == null) {
                    return;
                }
                Picked p = pick(msg);
                if (LOG.isLoggable(Level.FINE) || p == null) {
                    System.err.println("juxta-harness: pipe " + key + " got " + summary(msg));
                }
                out("PIPE_RECV " + key + " " + describe(p));
                if (replyPipe != null) {
                    echoes.execute(() -> pipeEcho(p, replyPipe, replyPeer));
                }
            });
            bound.put(key, in::close);
            return "PIPE_LISTENING " + key;
        } catch (Exception e) {
            return err("PIPE_LISTEN", e);
        }
    }

    private void pipeEcho(Picked p, PipeID replyPipe, PeerID replyPeer) {
        if (p == null) {
            out("ERROR PIPE_ECHO: nothing to echo (no non-jxta element with content)");
            return;
        }
        String key = replyPipe + " " + replyPeer;
        try {
            OutputPipe op = echoPipes.get(key);
            if (op == null || op.isClosed()) {
                op = pipeService.createOutputPipe(pipeAdv(replyPipe, PipeService.UnicastType),
                        Collections.singleton(replyPeer), CONNECT_TIMEOUT_MS);
                echoPipes.put(key, op);
            }
            Message reply = new Message();
            reply.addMessageElement(p.namespace, p.element);
            sendPipe(op, reply);
            out("PIPE_ECHOED " + p.element.getByteLength());
        } catch (Exception e) {
            echoPipes.remove(key);
            out(err("PIPE_ECHO", e));
        }
    }

    /** OutputPipe.send returns false when its 50-message queue stays full for 100 ms: retry. */
    private static void sendPipe(OutputPipe op, Message msg) throws IOException, InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(QUEUE_TIMEOUT_MS);
        while (!op.send(msg)) {
            if (System.nanoTime() > deadline) {
                throw new IOException("output pipe queue full for " + QUEUE_TIMEOUT_MS + " ms");
            }
            Thread.sleep(10);
        }
    }

    private String pipeSend(String[] parts) {
        if (parts.length < 4 || parts.length > 6) {
            return "ERROR usage: PIPE_SEND <pipe URN> <peer URN|-> <size> [count [unicast|propagate]]";
        }
        PipeID id;
        PeerID peer;
        int size;
        int count;
        String type;
        try {
            id = pipeId(parts[1]);
            // "-": no peer; a propagate pipe then goes to the whole group (through the
            // rendezvous: WirePipe.sendMessage walks it), a unicast pipe resolves by query.
            peer = "-".equals(parts[2]) ? null : peerIdArg(parts[2]);
            size = (int) sizeArg(parts[3], Integer.MAX_VALUE - 64);
            count = parts.length >= 5 ? (int) sizeArg(parts[4], Integer.MAX_VALUE) : 1;
            type = parts.length == 6 ? pipeType(parts[5]) : PipeService.UnicastType;
        } catch (Usage u) {
            return "ERROR " + u.getMessage();
        }
        byte[] payload = Main.pattern(size);
        String sha = Main.sha256(payload);
        long t0 = System.nanoTime();
        OutputPipe op;
        try {
            // Unicast: JXSE sends a JxtaPipeResolver query to `peer` and waits for Found=true.
            // Propagate with one peer: a BlockingWireOutputPipe, no resolution.
            // No peer: createOutputPipe(adv, timeout), group-wide for propagate.
            op = peer == null ? pipeService.createOutputPipe(pipeAdv(id, type), CONNECT_TIMEOUT_MS)
                    : pipeService.createOutputPipe(pipeAdv(id, type),
                    Collections.singleton(peer), CONNECT_TIMEOUT_MS);
        } catch (Exception e) {
            return err("PIPE_SEND resolve", e);
        }
        long t1 = System.nanoTime();
        try {
            for (int i = 0; i < count; i++) {
                sendPipe(op, payloadMessage(payload));
            }
        } catch (Exception e) {
            return err("PIPE_SEND send", e);
        } finally {
            // NonBlockingOutputPipe.close() only stops new sends: its worker still drains the queue.
            op.close();
        }
        System.err.printf("juxta-harness: PIPE_SEND %s -> %s: resolved in %d ms, %d x %d B queued in %d ms%n",
                id, peer, ms(t1 - t0), count, size, ms(System.nanoTime() - t1));
        return "PIPE_SENT " + count + " " + size + " " + sha;
    }

    private String pipeClose(String[] parts) {
        if (parts.length != 2) {
            return "ERROR usage: PIPE_CLOSE <pipe URN>";
        }
        String key;
        try {
            key = pipeId(parts[1]).toString();
        } catch (Usage u) {
            return "ERROR " + u.getMessage();
        }
        AutoCloseable c = bound.remove(key);
        if (c == null) {
            return "ERROR not bound here: " + key;
        }
        try {
            c.close();
        } catch (Exception e) {
            return err("PIPE_CLOSE", e);
        }
        return "PIPE_CLOSED " + key;
    }

    // ---------------------------------------------------------------- JxtaSocket

    private String socketServe(String[] parts) {
        if (parts.length != 3) {
            return "ERROR usage: SOCKET_SERVE <pipe URN> <reply size>";
        }
        PipeID id;
        long replySize;
        try {
            id = pipeId(parts[1]);
            replySize = sizeArg(parts[2], Long.MAX_VALUE);
        } catch (Usage u) {
            return "ERROR " + u.getMessage();
        }
        String key = id.toString();
        if (bound.containsKey(key)) {
            return "ERROR already bound here: " + key;
        }
        JxtaServerSocket server;
        try {
            // stream (reliable) = true, backlog 50, no encryption: JXSE's defaults.
            server = new JxtaServerSocket(group, pipeAdv(id, PipeService.UnicastType));
            server.setSoTimeout(0);   // accept() waits forever
        } catch (Exception e) {
            return err("SOCKET_SERVE", e);
        }
        bound.put(key, server::close);
        Thread acceptor = new Thread(() -> acceptLoop(server, key, replySize), "juxta-harness-accept-" + key);
        acceptor.setDaemon(true);
        acceptor.start();
        return "SOCKET_SERVING " + key;
    }

    private void acceptLoop(JxtaServerSocket server, String key, long replySize) {
        while (!server.isClosed()) {
            Socket s;
            try {
                s = server.accept();
            } catch (SocketTimeoutException again) {
                continue;
            } catch (IOException e) {
                if (!server.isClosed()) {
                    System.err.println("juxta-harness: accept on " + key + " failed: " + Main.oneLine(e));
                }
                return;
            }
            if (s == null) {
                continue;
            }
            accepted.add(s);
            workers.execute(() -> serveSocket(s, key, replySize));
        }
    }

    private void serveSocket(Socket s, String key, long replySize) {
        String result;
        long t0 = System.nanoTime();
        try {
            setSoTimeout(s);
            out("SOCKET_ACCEPTED " + key + " " + remotePeer(s));
            DataInputStream in = new DataInputStream(s.getInputStream());
            long n = in.readLong();
            if (n < 0 || n > MAX_SOCKET_PAYLOAD) {
                throw new IOException("bad length prefix " + n);
            }
            MessageDigest md = sha();
            readExactly(in, n, md);
            long t1 = System.nanoTime();
            out("SOCKET_RECV " + n + " " + hex(md));
            OutputStream os = s.getOutputStream();
            writePattern(os, replySize, sha());
            os.flush();
            long t2 = System.nanoTime();
            long extra = 0;
            byte[] buf = new byte[CHUNK];
            int r;
            while ((r = in.read(buf)) >= 0) {
                extra += r;
            }
            long t3 = System.nanoTime();
            s.close();
            System.err.printf("juxta-harness: SOCKET_SERVE %s: received %d B in %d ms, replied %d B in %d ms,"
                    + " EOF after %d ms (%d extra bytes), close %d ms%n", key, n, ms(t1 - t0), replySize,
                    ms(t2 - t1), ms(t3 - t2), extra, ms(System.nanoTime() - t3));
            result = "SOCKET_CLOSED ok";
        } catch (Exception e) {
            LOG.log(Level.FINE, "socket on " + key + " failed", e);
            try {
                s.close();
            } catch (Exception ignored) {
                // already failing
            }
            result = "SOCKET_CLOSED error " + Main.oneLine(e);
        } finally {
            accepted.remove(s);
        }
        out(result);
    }

    private String socketConnect(String[] parts) {
        if (parts.length != 5 && parts.length != 6) {
            return "ERROR usage: SOCKET_CONNECT <pipe URN> <peer URN> <size> <expect reply> [reliable|unreliable]";
        }
        if (parts.length == 6 && !parts[5].equals("reliable") && !parts[5].equals("unreliable")) {
            return "ERROR usage: SOCKET_CONNECT mode must be reliable or unreliable";
        }
        // JxtaSocket's `stream` flag: false asks the server for JXSE's unreliable mode.
        boolean stream = parts.length == 5 || parts[5].equals("reliable");
        PipeID id;
        PeerID peer;
        long size;
        long expect;
        try {
            id = pipeId(parts[1]);
            peer = peerIdArg(parts[2]);
            size = sizeArg(parts[3], Long.MAX_VALUE);
            expect = sizeArg(parts[4], Long.MAX_VALUE);
        } catch (Usage u) {
            return "ERROR " + u.getMessage();
        }
        workers.execute(() -> out(socketClient(id, peer, size, expect, stream)));
        return ASYNC;   // the answer comes from the worker
    }

    private String socketClient(PipeID id, PeerID peer, long size, long expect, boolean stream) {
        long t0 = System.nanoTime();
        JxtaSocket s = null;
        String stage = "connect";
        try {
            // Resolves the server pipe (PBP query to `peer`), then the JXTASOC handshake.
            s = new JxtaSocket(group, peer, pipeAdv(id, PipeService.UnicastType), CONNECT_TIMEOUT_MS, stream);
            setSoTimeout(s);
            accepted.add(s);
            long t1 = System.nanoTime();
            stage = "send";
            DataOutputStream os = new DataOutputStream(s.getOutputStream());
            os.writeLong(size);
            MessageDigest md = sha();
            writePattern(os, size, md);
            os.flush();
            long t2 = System.nanoTime();
            out("SOCKET_SENT " + size + " " + hex(md));
            stage = "reply";
            MessageDigest rmd = sha();
            readExactly(s.getInputStream(), expect, rmd);
            long t3 = System.nanoTime();
            stage = "close";
            if (CLOSE_DELAY_MS > 0) {
                Thread.sleep(CLOSE_DELAY_MS);
            }
            long t3b = System.nanoTime();
            s.close();
            long t4 = System.nanoTime();
            System.err.printf("juxta-harness: SOCKET_CONNECT %s @ %s: connect %d ms, send %d B %d ms,"
                    + " reply %d B %d ms, close %d ms (after a %d ms pause)%n", id, peer, ms(t1 - t0), size,
                    ms(t2 - t1), expect, ms(t3 - t2), ms(t4 - t3b), ms(t3b - t3));
            return "SOCKET_DONE " + expect + " " + hex(rmd);
        } catch (Exception e) {
            LOG.log(Level.FINE, "SOCKET_CONNECT failed", e);
            if (s != null) {
                try {
                    s.close();
                } catch (Exception ignored) {
                    // already failing
                }
            }
            return "ERROR SOCKET_CONNECT " + stage + ": " + Main.oneLine(e);
        } finally {
            if (s != null) {
                accepted.remove(s);
            }
        }
    }

    // ---------------------------------------------------------------- JxtaBiDiPipe

    private String bidiServe(String[] parts) {
        if (parts.length != 2) {
            return "ERROR usage: BIDI_SERVE <pipe URN>";
        }
        PipeID id;
        try {
            id = pipeId(parts[1]);
        } catch (Usage u) {
            return "ERROR " + u.getMessage();
        }
        String key = id.toString();
        if (bound.containsKey(key)) {
            return "ERROR already bound here: " + key;
        }
        try {
            JxtaServerPipe server = new JxtaServerPipe(group, pipeAdv(id, PipeService.UnicastType),
                    new ServerPipeAcceptListener() {
                        public void pipeAccepted(JxtaBiDiPipe pipe) {
                            bidiAccepted(pipe, key);
                        }

                        public void serverPipeClosed() {
                            System.err.println("juxta-harness: server pipe " + key + " closed");
                        }
                    });
            bound.put(key, server::close);
            return "BIDI_SERVING " + key;
        } catch (Exception e) {
            return err("BIDI_SERVE", e);
        }
    }

    private void bidiAccepted(JxtaBiDiPipe pipe, String key) {
        accepted.add(pipe::close);
        out("BIDI_ACCEPTED " + key + " " + remotePeer(pipe) + " " + (isReliable(pipe) ? "reliable" : "unreliable"));
        pipe.setPipeEventListener(event -> {
            if (event == JxtaBiDiPipe.PIPE_CLOSED_EVENT) {
                out("BIDI_CLOSED " + key);
            }
        });
        pipe.setMessageListener((PipeMsgEvent ev) -> {
            Message msg = ev.getMessage();
            if (msg == null) {
                return;
            }
            Picked p = pick(msg);
            out("BIDI_RECV " + describe(p));
            // Echo every non-"jxta" element, same namespace, name, type and bytes.
            Message echo = new Message();
            Message.ElementIterator it = msg.getMessageElements();
            while (it.hasNext()) {
                MessageElement el = it.next();
                if (!"jxta".equals(it.getNamespace())) {
                    echo.addMessageElement(it.getNamespace(), el);
                }
            }
            echoes.execute(() -> {
                try {
                    sendBidi(pipe, echo);
                } catch (Exception e) {
                    out(err("BIDI_ECHO", e));
                }
            });
        });
    }

    private static void setSoTimeout(Socket s) throws IOException {
        if (SOCKET_TIMEOUT_MS >= 0) {
            s.setSoTimeout(SOCKET_TIMEOUT_MS);
        }
    }

    /** JxtaSocketAddress.toString() is a multi-line dump: print just the peer ID. */
    private static String remotePeer(Socket s) {
        java.net.SocketAddress a = s.getRemoteSocketAddress();
        if (a instanceof net.jxta.socket.JxtaSocketAddress) {
            return String.valueOf(((net.jxta.socket.JxtaSocketAddress) a).getPeerId());
        }
        return "-";
    }

    private static String remotePeer(JxtaBiDiPipe pipe) {
        try {
            return String.valueOf(pipe.getRemotePeerAdvertisement().getPeerID());
        } catch (RuntimeException e) {
            return "-";
        }
    }

    /**
     * The mode an accepted pipe runs in. JXSE 2.7's JxtaServerPipe takes it from the request and
     * has no getter for it: read the protected field.
     */
    private static boolean isReliable(JxtaBiDiPipe pipe) {
        try {
            java.lang.reflect.Field f = JxtaBiDiPipe.class.getDeclaredField("isReliable");
            f.setAccessible(true);
            return f.getBoolean(pipe);
        } catch (ReflectiveOperationException | RuntimeException e) {
            return false;
        }
    }

    /** JxtaBiDiPipe.sendMessage returns false when the messenger queue is saturated: retry. */
    private static void sendBidi(JxtaBiDiPipe pipe, Message msg) throws IOException, InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(QUEUE_TIMEOUT_MS);
        while (!pipe.sendMessage(msg)) {
            if (System.nanoTime() > deadline) {
                throw new IOException("bidi pipe refused the message for " + QUEUE_TIMEOUT_MS + " ms");
            }
            Thread.sleep(10);
        }
    }

    private String bidiConnect(String[] parts) {
        if (parts.length != 5 && parts.length != 6) {
            return "ERROR usage: BIDI_CONNECT <pipe URN> <peer URN> <size[,size...]> <count> [reliable|unreliable]";
        }
        PipeID id;
        PeerID peer;
        int[] sizes;
        int count;
        boolean reliable = false;
        try {
            id = pipeId(parts[1]);
            peer = peerIdArg(parts[2]);
            String[] list = parts[3].split(",", -1);
            sizes = new int[list.length];
            for (int i = 0; i < list.length; i++) {
                sizes[i] = (int) sizeArg(list[i], Integer.MAX_VALUE - 64);
            }
            count = (int) sizeArg(parts[4], Integer.MAX_VALUE);
            if (parts.length == 6) {
                switch (parts[5].toLowerCase()) {
                    case "reliable": reliable = true; break;
                    case "unreliable": reliable = false; break;
                    default: throw new Usage("expected reliable or unreliable: " + parts[5]);
                }
            }
        } catch (Usage u) {
            return "ERROR " + u.getMessage();
        }
        boolean rel = reliable;
        workers.execute(() -> out(bidiClient(id, peer, sizes, count, rel)));
        return ASYNC;   // the answer comes from the worker
    }

    private String bidiClient(PipeID id, PeerID peer, int[] sizes, int count, boolean reliable) {
        // Message i carries sizes[i % n] pattern bytes; echo i must match it, so with several
        // sizes a reordered echo is caught.
        byte[][] payloads = new byte[sizes.length][];
        String[] wants = new String[sizes.length];
        for (int k = 0; k < sizes.length; k++) {
            payloads[k] = Main.pattern(sizes[k]);
            wants[k] = sizes[k] + " " + Main.sha256(payloads[k]);
        }
        String sha = Main.sha256(payloads[0]);
        String size = sizes.length == 1 ? Integer.toString(sizes[0]) : java.util.Arrays.toString(sizes);
        BlockingQueue<String> got = new LinkedBlockingQueue<>();
        JxtaBiDiPipe pipe = new JxtaBiDiPipe();
        String stage = "connect";
        long t0 = System.nanoTime();
        try {
            pipe.connect(group, peer, pipeAdv(id, PipeService.UnicastType), CONNECT_TIMEOUT_MS,
                    (PipeMsgEvent ev) -> {
                        Message m = ev.getMessage();
                        if (m != null) {
                            got.add(describe(pick(m)));
                        }
                    }, reliable);
            long t1 = System.nanoTime();
            stage = "send";
            for (int i = 0; i < count; i++) {
                sendBidi(pipe, payloadMessage(payloads[i % payloads.length]));
            }
            stage = "echo";
            // All echoes must come back intact; their order is not checked here: JXSE's TCP
            // transport runs every received message on a thread pool and its reliable input
            // stream calls the listener outside any lock, so this listener may see them in any
            // order (the sender's order is checked by the other side).
            long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(ECHO_TIMEOUT_MS);
            List<String> echoes = new ArrayList<>();
            List<String> wanted = new ArrayList<>();
            for (int i = 0; i < count; i++) {
                String echo = got.poll(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
                if (echo == null) {
                    throw new IOException("got " + i + " of " + count + " echoes within " + ECHO_TIMEOUT_MS + " ms");
                }
                echoes.add(echo);
                wanted.add(wants[i % wants.length]);
            }
            Collections.sort(echoes);
            Collections.sort(wanted);
            if (!echoes.equals(wanted)) {
                throw new IOException("echoes " + echoes + ", want " + wanted);
            }
            long t2 = System.nanoTime();
            stage = "close";
            pipe.close();
            System.err.printf("juxta-harness: BIDI_CONNECT %s @ %s (%s): connect %d ms, %d x %s B round trips %d ms,"
                    + " close %d ms%n", id, peer, reliable ? "reliable" : "unreliable", ms(t1 - t0), count, size,
                    ms(t2 - t1), ms(System.nanoTime() - t2));
            return "BIDI_DONE " + count + " " + sha;
        } catch (Exception e) {
            LOG.log(Level.FINE, "BIDI_CONNECT failed", e);
            try {
                pipe.close();
            } catch (Exception ignored) {
                // already failing
            }
            return "ERROR BIDI_CONNECT " + stage + ": " + Main.oneLine(e);
        }
    }

    // ---------------------------------------------------------------- misc

    private static long ms(long nanos) {
        return TimeUnit.NANOSECONDS.toMillis(nanos);
    }

    private static void out(String line) {
        Main.out(line);
    }

    /** Close everything we opened (best effort, never blocks for long: run before stopNetwork). */
    void shutdown() {
        workers.shutdownNow();
        echoes.shutdownNow();
        List<AutoCloseable> all = new ArrayList<>(bound.values());
        all.addAll(accepted);
        for (OutputPipe p : echoPipes.values()) {
            all.add(p::close);
        }
        bound.clear();
        accepted.clear();
        echoPipes.clear();
        Thread closer = new Thread(() -> {
            for (AutoCloseable c : all) {
                try {
                    c.close();
                } catch (Exception ignored) {
                    // best effort
                }
            }
        }, "juxta-harness-closer");
        closer.setDaemon(true);
        closer.start();
        try {
            closer.join(3_000);   // a JxtaSocket close can wait for a closeACK: don't let it block the exit
        } catch (InterruptedException ie) {
            Thread.currentThread().interrupt();
        }
    }
}
