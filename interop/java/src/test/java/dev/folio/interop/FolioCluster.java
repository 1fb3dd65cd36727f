package dev.folio.interop;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import org.apache.bookkeeper.conf.ClientConfiguration;

/**
 * The Folio cluster the tests run against, as {@code interop/run} describes it in system
 * properties (ZooKeeper connect string, ledgers root, bookie ids, the folio binary), and the
 * client configuration and payloads every test uses.
 */
final class FolioCluster {
    private FolioCluster() {}

    static final byte[] PASSWORD = "folio-interop".getBytes();

    static String required(String name) {
        String v = System.getProperty(name);
        if (v == null || v.isBlank() || v.startsWith("${")) {
            throw new IllegalStateException(
                    "system property " + name + " is not set: run the tests through interop/run");
        }
        return v;
    }

    static String zk() {
        return required("folio.zk");
    }

    static String ledgersRoot() {
        String v = System.getProperty("folio.ledgersRoot");
        return v == null || v.isBlank() ? "/ledgers" : v;
    }

    /** The metadata service URI the Java client uses: "use whatever LAYOUT says". */
    static String javaMetadataUri() {
        return "zk+null://" + zk() + ledgersRoot();
    }

    /** The same cluster as Folio's CLI spells it. */
    static String folioMetadataUri() {
        return "zk://" + zk() + ledgersRoot();
    }

    static List<String> bookies() {
        return new ArrayList<>(Arrays.asList(required("folio.bookies").split(",")));
    }

    static Path folioBin() {
        return Path.of(required("folio.bin"));
    }

    static Path workDir() {
        return Path.of(required("folio.workDir"));
    }

    /** A client configuration with generous timeouts (the machine is slow and shared). */
    static ClientConfiguration conf(boolean v2) {
        ClientConfiguration conf = new ClientConfiguration();
        conf.setMetadataServiceUri(javaMetadataUri());
        conf.setUseV2WireProtocol(v2);
        conf.setZkTimeout(30_000);
        conf.setAddEntryTimeout(120);
        conf.setReadEntryTimeout(120);
        conf.setClientConnectTimeoutMillis(30_000);
        return conf;
    }

    /**
     * Entry sizes cycle through small and medium ones (0 B to 16 KiB), with 64 KiB every 97th
     * entry, 256 KiB every 1999th and one of 1 MiB (entry 500): about 3.4 KiB on average.
     */
    static int entrySize(int i) {
        if (i == 500) {
            return 1 << 20;
        }
        if (i % 1999 == 7) {
            return 256 * 1024;
        }
        if (i % 97 == 13) {
            return 65_536;
        }
        int[] sizes = {1, 0, 17, 100, 513, 1024, 3000, 4096, 100, 16_384};
        return sizes[i % sizes.length];
    }

    /** The deterministic payload of entry {@code i} of a ledger written with {@code seed}. */
    static byte[] payload(long seed, int i) {
        byte[] b = new byte[entrySize(i)];
        new Random(seed * 1_000_003L + i).nextBytes(b);
        return b;
    }

    static long totalLength(long seed, int count) {
        long n = 0;
        for (int i = 0; i < count; i++) {
            n += entrySize(i);
        }
        return n;
    }
}
