/*
 * Java 9+ replacement for JXSE 2.7's net.jxta.impl.peergroup.CompatibilityUtils.
 *
 * Written for the Juxta interop harness from the behaviour described in
 * shared/docs/jxse-on-java17.md (not derived from JXSE's own file).
 *
 * Why it exists: JXSE 2.7 decides whether a module implementation can be loaded
 * by checking the "Efmt" compatibility statement ("JRE1.5") against the
 * specification version of the java.lang package. On Java 9 and later that
 * package has no specification version, the check throws, every built-in
 * module is rejected and startNetwork() fails with "Could not locate World
 * PeerGroup Module Implementation". This class has the same fully qualified
 * name and must come BEFORE the jxse jar on the classpath (the jar is not
 * sealed), so the JVM loads it instead of the original.
 *
 * JXSE calls exactly three public static methods on this class.
 */
package net.jxta.impl.peergroup;

import java.util.Enumeration;
import java.util.logging.Level;
import java.util.logging.Logger;

import net.jxta.document.AdvertisementFactory;
import net.jxta.document.Element;
import net.jxta.document.MimeMediaType;
import net.jxta.document.StructuredDocumentFactory;
import net.jxta.document.TextElement;
import net.jxta.document.XMLDocument;
import net.jxta.platform.ModuleSpecID;
import net.jxta.protocol.ModuleImplAdvertisement;

public final class CompatibilityUtils {

    private static final Logger LOG = Logger.getLogger(CompatibilityUtils.class.getName());

    /** Name of the compatibility statement document. */
    private static final String COMP_DOCTYPE = "Comp";
    /** Execution format element: "JRE&lt;version&gt;" or "JDK&lt;version&gt;". */
    private static final String EFMT = "Efmt";
    /** Binding element. */
    private static final String BIND = "Bind";

    /** Execution format written into new compatibility statements (what JXSE ships). */
    private static final String DEFAULT_EFMT = "JRE1.5";
    /** The only binding this implementation understands. */
    private static final String REF_IMPL_BINDING = "V2.0 Ref Impl";

    private static final String DEFAULT_PACKAGE_URI =
            "http://download.java.net/jxta/jxta-jxse/latest/jnlp/lib/jxta.jar";
    private static final String DEFAULT_PROVIDER = "sun.com";

    /** Major version of the running Java platform, e.g. 17. */
    private static final int RUNTIME_MAJOR = runtimeMajor();

    private CompatibilityUtils() {
    }

    /**
     * Builds a module implementation advertisement with the default
     * compatibility statement, package URI and provider.
     */
    public static ModuleImplAdvertisement createModuleImplAdvertisement(ModuleSpecID msid, String code, String descr) {
        ModuleImplAdvertisement adv = (ModuleImplAdvertisement)
                AdvertisementFactory.newAdvertisement(ModuleImplAdvertisement.getAdvertisementType());
        adv.setModuleSpecID(msid);
        adv.setCode(code);
        adv.setDescription(descr);
        adv.setCompat(createDefaultCompatStatement());
        adv.setUri(DEFAULT_PACKAGE_URI);
        adv.setProvider(DEFAULT_PROVIDER);
        return adv;
    }

    /**
     * A "Comp" XML document (text/xml, UTF-8) holding Efmt and Bind.
     */
    @SuppressWarnings("unchecked")
    public static XMLDocument createDefaultCompatStatement() {
        XMLDocument doc = (XMLDocument)
                StructuredDocumentFactory.newStructuredDocument(MimeMediaType.XMLUTF8, COMP_DOCTYPE);
        doc.appendChild(doc.createElement(EFMT, DEFAULT_EFMT));
        doc.appendChild(doc.createElement(BIND, REF_IMPL_BINDING));
        return doc;
    }

    /**
     * True when the statement is a text element whose children are exactly one
     * acceptable Efmt and one acceptable Bind (in any order). Anything else,
     * including any exception while inspecting it, means "not compatible".
     */
    @SuppressWarnings("rawtypes")
    public static boolean isCompatible(Element compat) {
        try {
            if (!(compat instanceof TextElement)) {
                return false;
            }
            boolean efmtOk = false;
            boolean bindOk = false;
            int count = 0;
            Enumeration children = compat.getChildren();
            while (children.hasMoreElements()) {
                Object child = children.nextElement();
                count++;
                if (count > 2 || !(child instanceof TextElement)) {
                    return false;
                }
                TextElement text = (TextElement) child;
                String key = text.getKey();
                String value = text.getTextValue();
                if (EFMT.equals(key)) {
                    if (efmtOk || !acceptableExecutionFormat(value)) {
                        return false;
                    }
                    efmtOk = true;
                } else if (BIND.equals(key)) {
                    if (bindOk || value == null || !REF_IMPL_BINDING.equals(value.trim())) {
                        return false;
                    }
                    bindOk = true;
                } else {
                    return false;
                }
            }
            return efmtOk && bindOk;
        } catch (RuntimeException | LinkageError failure) {
            if (LOG.isLoggable(Level.FINE)) {
                LOG.log(Level.FINE, "Rejecting unreadable compatibility statement", failure);
            }
            return false;
        }
    }

    /** "JRE1.5", "JDK 11", "JRE 17" ... with a version no newer than the runtime. */
    private static boolean acceptableExecutionFormat(String value) {
        if (value == null) {
            return false;
        }
        String v = value.trim();
        if (v.length() < 3) {
            return false;
        }
        String prefix = v.substring(0, 3);
        if (!"JRE".equals(prefix) && !"JDK".equals(prefix)) {
            return false;
        }
        int major = majorOf(v.substring(3).replace(" ", ""));
        return major > 0 && major <= RUNTIME_MAJOR;
    }

    /** "1.5" -> 5, "1.8.0" -> 8, "11" -> 11, "17.0.2" -> 17; -1 if unparseable. */
    static int majorOf(String version) {
        if (version == null || version.isEmpty()) {
            return -1;
        }
        String[] parts = version.split("\\.");
        try {
            int first = Integer.parseInt(parts[0]);
            if (first == 1) {
                return parts.length > 1 ? Integer.parseInt(parts[1]) : 1;
            }
            return first;
        } catch (NumberFormatException notANumber) {
            return -1;
        }
    }

    private static int runtimeMajor() {
        int major = majorOf(System.getProperty("java.specification.version", ""));
        if (major < 0) {
            major = Runtime.version().feature();
        }
        return major;
    }
}
