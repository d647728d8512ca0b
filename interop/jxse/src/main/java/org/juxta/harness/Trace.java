package org.juxta.harness;

import java.nio.charset.StandardCharsets;

import net.jxta.endpoint.EndpointAddress;
import net.jxta.endpoint.EndpointService;
import net.jxta.endpoint.Message;
import net.jxta.endpoint.MessageElement;
import net.jxta.endpoint.MessageFilterListener;

/**
 * -Djuxta.harness.trace=true: log every message the NetPeerGroup endpoint service delivers
 * (after decoding, CBJX check and router processing: the ERM element is gone, the
 * fingerprint element is still there) to stderr, one line per message plus one per element;
 * text elements
 * (text/*) of up to 8 KB are printed in full, with newlines shown as "\n". A debugging aid
 * for the Rust side: it shows, e.g., the PBP query JXSE sends and the JXTASOC handshake.
 * Only incoming messages: JXSE 2.7 runs outgoing filters for propagated messages only.
 */
final class Trace implements MessageFilterListener {

    private static final int MAX_TEXT = 8192;

    private final String dir;
    /** JXSE calls a (null, null) filter once per element of the message: print each message once. */
    private final ThreadLocal<Message> last = new ThreadLocal<>();

    private Trace(String dir) {
        this.dir = dir;
    }

    static void install(EndpointService endpoint) {
        endpoint.addIncomingMessageFilterListener(new Trace("IN "), null, null);
        System.err.println("juxta-harness: message trace on");
    }

    @Override
    public Message filterMessage(Message msg, EndpointAddress src, EndpointAddress dst) {
        if (msg == null || last.get() == msg) {
            return msg;
        }
        last.set(msg);
        try {
            StringBuilder sb = new StringBuilder();
            sb.append("juxta-harness: TRACE ").append(dir).append(' ').append(src).append(" -> ").append(dst);
            Message.ElementIterator it = msg.getMessageElements();
            while (it.hasNext()) {
                MessageElement el = it.next();
                sb.append("\n    ").append(it.getNamespace()).append(':').append(el.getElementName())
                        .append(" [").append(el.getMimeType()).append(", ").append(el.getByteLength()).append(" B]");
                String type = String.valueOf(el.getMimeType());
                if (type.startsWith("text/") && el.getByteLength() <= MAX_TEXT) {
                    String text = new String(el.getBytes(false), StandardCharsets.UTF_8);
                    sb.append(' ').append(text.replace("\r", "").replace("\n", "\\n"));
                }
            }
            System.err.println(sb);
        } catch (RuntimeException e) {
            System.err.println("juxta-harness: TRACE failed: " + Main.oneLine(e));
        }
        return msg;
    }
}
