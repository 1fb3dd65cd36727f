package dev.folio.interop;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.bookkeeper.client.BKException;
import org.apache.bookkeeper.client.BookKeeper;
import org.apache.bookkeeper.client.BookKeeper.DigestType;
import org.apache.bookkeeper.client.LedgerHandle;
import org.apache.bookkeeper.conf.ClientConfiguration;
import org.apache.bookkeeper.tls.TLSContextFactory;
import org.junit.jupiter.api.Test;

/**
 * BookKeeper's Java client with TLS (JDK provider, PEM trust store, hostname verification on)
 * against Folio bookies with TLS, under fresh ledger roots on the interop ZooKeeper: with a
 * client certificate where the bookies require one (v3 and v2 wire), refused without one, and
 * refused by hostname verification when the bookie's certificate names another host. The
 * certificates are made here with openssl.
 */
class TlsInteropTest {

    static Path openssl(Path dir, String... args) throws Exception {
        List<String> cmd = new ArrayList<>();
        cmd.add("openssl");
        cmd.addAll(List.of(args));
        Process p = new ProcessBuilder(cmd).directory(dir.toFile())
                .redirectErrorStream(true).redirectOutput(dir.resolve("openssl.log").toFile()).start();
        assertTrue(p.waitFor(60, TimeUnit.SECONDS) && p.exitValue() == 0,
                "openssl " + String.join(" ", args) + ": " + Files.readString(dir.resolve("openssl.log")));
        return dir;
    }

    /** A CA in dir/NAME.pem (key NAME.key). */
    static Path ca(Path dir, String name) throws Exception {
        openssl(dir, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-keyout", name + ".key", "-out", name + ".pem", "-days", "2", "-subj", "/CN=" + name,
                "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign");
        return dir.resolve(name + ".pem");
    }

    /** A leaf signed by CA: dir/NAME.pem and dir/NAME.key (PKCS#8). */
    /** The CAs and leaves of a mutual-TLS cluster: a bookie certificate for 127.0.0.1, and
     * client certificates with the authorized role "app" and the unauthorized "guest". */
    static void mutualTlsCerts(Path certs) throws Exception {
        ca(certs, "bookies-ca");
        ca(certs, "clients-ca");
        leaf(certs, "bookies-ca", "bookie", "/CN=127.0.0.1", "IP:127.0.0.1,DNS:localhost");
        leaf(certs, "clients-ca", "app", "/CN=java-client/OU=0:app", "DNS:java-client");
        leaf(certs, "clients-ca", "guest", "/CN=guest/OU=0:guest", "DNS:guest");
    }

    static void leaf(Path dir, String ca, String name, String subject, String san) throws Exception {
        openssl(dir, "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-keyout", name + ".key", "-out", name + ".csr", "-subj", subject);
        Files.writeString(dir.resolve(name + ".ext"), "basicConstraints=CA:FALSE\n"
                + "extendedKeyUsage=serverAuth,clientAuth\n" + (san.isEmpty() ? "" : "subjectAltName=" + san + "\n"));
        openssl(dir, "x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem", "-CAkey", ca + ".key",
                "-CAcreateserial", "-out", name + ".pem", "-days", "2", "-extfile", name + ".ext");
    }

    static final class TlsBookie implements AutoCloseable {
        final Process process;
        final String id;

        TlsBookie(String metadataUri, Path dir, String tlsConfig) throws Exception {
            Files.createDirectories(dir);
            Path conf = dir.resolve("bookie.toml");
            Files.writeString(conf, "listen_address = \"127.0.0.1\"\nadvertisedAddress = \"127.0.0.1\"\n"
                    + "disk_usage_threshold = 0.999\ndisk_usage_lwm_threshold = 0.998\n" + tlsConfig);
            process = new ProcessBuilder(FolioCluster.folioBin().toString(), "bookie", "--metadata", metadataUri,
                    "--config", conf.toString(), "--data-dir", dir.resolve("data").toString(), "--port", "0")
                    .redirectError(dir.resolve("bookie.err").toFile()).start();
            FolioCli.LineReader lines = new FolioCli.LineReader(process.getInputStream());
            String found = null;
            String l;
            while ((l = lines.next(120)) != null && !l.equals("ready")) {
                if (l.startsWith("bookie ") && l.contains(" listening on ")) {
                    found = l.substring("bookie ".length(), l.indexOf(" listening on "));
                }
            }
            if (!"ready".equals(l) || found == null) {
                process.destroyForcibly();
                throw new AssertionError("folio bookie did not start: " + Files.readString(dir.resolve("bookie.err")));
            }
            id = found;
        }

        @Override
        public void close() throws InterruptedException {
            process.destroy();
            if (!process.waitFor(60, TimeUnit.SECONDS)) {
                process.destroyForcibly();
            }
        }
    }

    static String newRoot(String prefix) throws Exception {
        String root = "/" + prefix + "-" + System.nanoTime();
        try (FolioCli init = FolioCli.startOn("zk://" + FolioCluster.zk() + root, "shell", "initnewcluster")) {
            assertEquals(0, init.waitFor(), "folio shell initnewcluster on " + root);
        }
        return root;
    }

    static String bookieTls(Path certs, String name, String clientCa) {
        String s = "tlsProviderFactoryClass = \"org.apache.bookkeeper.tls.TLSContextFactory\"\n"
                + "tlsKeyStoreType = \"PEM\"\n"
                + "tlsKeyStore = \"" + certs.resolve(name + ".key") + "\"\n"
                + "tlsCertificatePath = \"" + certs.resolve(name + ".pem") + "\"\n";
        if (clientCa != null) {
            s += "tlsTrustStoreType = \"PEM\"\ntlsTrustStore = \"" + certs.resolve(clientCa + ".pem") + "\"\n"
                    + "tlsClientAuthentication = true\n"
                    + "bookieAuthProviderFactoryClass = \"org.apache.bookkeeper.tls.BookieAuthZFactory\"\n"
                    + "authorizedRoles = \"app\"\n";
        }
        return s;
    }

    /** The Java client with TLS: JDK provider, PEM trust store, hostname verification on. */
    static ClientConfiguration tlsConf(String root, Path certs, boolean v2, String clientCert) {
        ClientConfiguration conf = FolioCluster.conf(v2);
        conf.setMetadataServiceUri("zk+null://" + FolioCluster.zk() + root);
        conf.setTLSProviderFactoryClass(TLSContextFactory.class.getName());
        conf.setTLSProvider("JDK");
        conf.setTLSTrustStoreType("PEM");
        conf.setTLSTrustStore(certs.resolve("bookies-ca.pem").toString());
        conf.setHostnameVerificationEnabled(true);
        conf.setAddEntryTimeout(30);
        if (clientCert != null) {
            // BookKeeper's client presents its certificate only with tlsClientAuthentication.
            conf.setTLSClientAuthentication(true);
            conf.setTLSKeyStoreType("PEM");
            conf.setTLSKeyStore(certs.resolve(clientCert + ".key").toString());
            conf.setTLSCertificatePath(certs.resolve(clientCert + ".pem").toString());
        }
        return conf;
    }

    @Test
    void javaClientWritesAndReadsOverMutualTls() throws Exception {
        Path work = FolioCluster.workDir().resolve("tls-" + System.nanoTime());
        Path certs = Files.createDirectories(work.resolve("certs"));
        mutualTlsCerts(certs);
        String root = newRoot("tls");
        List<TlsBookie> bookies = new ArrayList<>();
        try {
            for (int i = 1; i <= 3; i++) {
                bookies.add(new TlsBookie("zk://" + FolioCluster.zk() + root, work.resolve("bookie" + i),
                        bookieTls(certs, "bookie", "clients-ca")));
            }
            for (boolean v2 : new boolean[] {false, true}) {
                long seed = System.nanoTime();
                int count = 300;
                long id;
                try (BookKeeper bk = new BookKeeper(tlsConf(root, certs, v2, "app"))) {
                    LedgerHandle lh = bk.createLedger(3, 2, 2, DigestType.CRC32C, FolioCluster.PASSWORD);
                    id = lh.getId();
                    RoundTripTest.appendAll(lh, seed, count);
                    lh.close();
                    LedgerHandle r = bk.openLedger(id, DigestType.CRC32C, FolioCluster.PASSWORD);
                    RoundTripTest.readAllBack(r, seed, count);
                }
                // Folio's CLI reads the Java ledger over TLS with its own client certificate.
                List<byte[]> read = FolioCli.readLedgerOn("zk://" + FolioCluster.zk() + root, id,
                        "--tls-ca", certs.resolve("bookies-ca.pem").toString(),
                        "--tls-cert", certs.resolve("app.pem").toString(),
                        "--tls-key", certs.resolve("app.key").toString());
                assertEquals(count, read.size());
                for (int i = 0; i < count; i++) {
                    assertArrayEquals(FolioCluster.payload(seed, i), read.get(i), "payload of entry " + i);
                }
            }
            // Without a client certificate, and with one whose role is not authorized, the
            // bookies refuse the Java client: no entry is acknowledged.
            for (String cert : new String[] {null, "guest"}) {
                try (BookKeeper bk = new BookKeeper(tlsConf(root, certs, false, cert))) {
                    LedgerHandle lh = bk.createLedger(3, 2, 2, DigestType.CRC32C, FolioCluster.PASSWORD);
                    assertThrows(BKException.class, () -> lh.addEntry(new byte[] {1, 2, 3}),
                            "an add without an authorized client certificate was acknowledged (" + cert + ")");
                }
            }
        } finally {
            for (TlsBookie b : bookies) {
                b.close();
            }
        }
    }

    @Test
    void javaHostnameVerificationRefusesACertificateForAnotherHost() throws Exception {
        Path work = FolioCluster.workDir().resolve("tls-host-" + System.nanoTime());
        Path certs = Files.createDirectories(work.resolve("certs"));
        ca(certs, "bookies-ca");
        leaf(certs, "bookies-ca", "elsewhere", "/CN=other.example", "DNS:other.example");
        leaf(certs, "bookies-ca", "bookie", "/CN=127.0.0.1", "IP:127.0.0.1");
        String wrongRoot = newRoot("tls-wrong-host");
        String rightRoot = newRoot("tls-right-host");
        try (TlsBookie wrong = new TlsBookie("zk://" + FolioCluster.zk() + wrongRoot, work.resolve("wrong"),
                bookieTls(certs, "elsewhere", null));
                TlsBookie right = new TlsBookie("zk://" + FolioCluster.zk() + rightRoot, work.resolve("right"),
                        bookieTls(certs, "bookie", null))) {
            try (BookKeeper bk = new BookKeeper(tlsConf(wrongRoot, certs, false, null))) {
                LedgerHandle lh = bk.createLedger(1, 1, 1, DigestType.CRC32C, FolioCluster.PASSWORD);
                assertThrows(BKException.class, () -> lh.addEntry(new byte[] {1}),
                        "the Java client accepted a certificate for other.example from " + wrong.id);
            }
            // The same client against a certificate naming 127.0.0.1 works (TLS without a
            // client certificate: the bookie does not require one).
            try (BookKeeper bk = new BookKeeper(tlsConf(rightRoot, certs, false, null))) {
                LedgerHandle lh = bk.createLedger(1, 1, 1, DigestType.CRC32C, FolioCluster.PASSWORD);
                assertEquals(0, lh.addEntry(new byte[] {1}));
                lh.close();
                LedgerHandle r = bk.openLedger(lh.getId(), DigestType.CRC32C, FolioCluster.PASSWORD);
                assertArrayEquals(new byte[] {1}, r.readEntries(0, 0).nextElement().getEntry());
            }
        }
    }

    /**
     * A mixed TLS cluster (issue 19): two Apache BookKeeper 4.18.2 bookies (child JVMs, JDK TLS
     * provider, PEM key and trust store, {@code tlsClientAuthentication}, {@code BookieAuthZFactory}
     * with {@code authorizedRoles = app}) and two Folio bookies with the same settings, under a
     * fresh root. E4/Qw3/Qa2 ledgers span all four: the Java client (v3 wire) and Folio's client
     * ({@code folio ledger write --tls-*}) each write one, and each reads both back byte for byte.
     * Without a client certificate, and with an unauthorized one, no add is acknowledged.
     */
    @Test
    void mixedTlsClusterWithClientAuthentication() throws Exception {
        Path work = FolioCluster.workDir().resolve("tls-mixed-" + System.nanoTime());
        Path certs = Files.createDirectories(work.resolve("certs"));
        mutualTlsCerts(certs);
        String root = newRoot("tls-mixed");
        String folioUri = "zk://" + FolioCluster.zk() + root;
        List<String> javaTls = List.of(
                "tlsProviderFactoryClass=org.apache.bookkeeper.tls.TLSContextFactory",
                "tlsProvider=JDK",
                "tlsKeyStoreType=PEM",
                "tlsKeyStore=" + certs.resolve("bookie.key"),
                "tlsCertificatePath=" + certs.resolve("bookie.pem"),
                "tlsTrustStoreType=PEM",
                "tlsTrustStore=" + certs.resolve("clients-ca.pem"),
                "tlsClientAuthentication=true",
                "bookieAuthProviderFactoryClass=org.apache.bookkeeper.tls.BookieAuthZFactory",
                "authorizedRoles=app");
        List<TlsBookie> folio = new ArrayList<>();
        List<JavaBookie> java = new ArrayList<>();
        try {
            for (int i = 1; i <= 2; i++) {
                folio.add(new TlsBookie(folioUri, work.resolve("folio-bookie" + i),
                        bookieTls(certs, "bookie", "clients-ca")));
                java.add(JavaBookie.start(work.resolve("java-bookie" + i), "zk+null://" + FolioCluster.zk() + root,
                        javaTls));
            }
            ClientConfiguration plainAdmin = FolioCluster.conf(false);
            plainAdmin.setMetadataServiceUri("zk+null://" + FolioCluster.zk() + root);
            try (org.apache.bookkeeper.client.BookKeeperAdmin admin =
                    new org.apache.bookkeeper.client.BookKeeperAdmin(plainAdmin)) {
                for (JavaBookie b : java) {
                    b.awaitRegistered(admin);
                }
            }
            java.util.Set<String> all = new java.util.HashSet<>();
            folio.forEach(b -> all.add(b.id));
            java.forEach(b -> all.add(b.id));
            String[] tlsFlags = {"--tls-ca", certs.resolve("bookies-ca.pem").toString(),
                "--tls-cert", certs.resolve("app.pem").toString(),
                "--tls-key", certs.resolve("app.key").toString()};
            int count = 200;

            // The Java client writes over TLS to all four.
            long javaSeed = System.nanoTime();
            long javaLedger;
            try (BookKeeper bk = new BookKeeper(tlsConf(root, certs, false, "app"))) {
                LedgerHandle lh = bk.createLedger(4, 3, 2, DigestType.CRC32C, FolioCluster.PASSWORD);
                javaLedger = lh.getId();
                RoundTripTest.appendAll(lh, javaSeed, count);
                lh.close();
                assertEquals(all, ensembleOf(bk, javaLedger));
            }

            // Folio's client writes over TLS to all four.
            long folioLedger;
            try (FolioCli w = FolioCli.startOn(folioUri, concat(new String[] {"ledger", "write", "-e", "4", "-w", "3",
                "-a", "2", "--digest", "crc32c", "--password", FolioCli.PASSWORD, "--hex"}, tlsFlags))) {
                folioLedger = Long.parseLong(w.expect("ledger"));
                for (int i = 0; i < count; i++) {
                    w.writeEntry(FolioCluster.payload(folioLedger, i));
                }
                w.stdin.close();
                for (int i = 0; i < count; i++) {
                    assertEquals(Integer.toString(i), w.expect("acked"));
                }
                assertEquals(Integer.toString(count - 1), w.expect("closed"));
                assertEquals(0, w.waitFor());
            }

            // Each client reads both ledgers back over TLS.
            try (BookKeeper bk = new BookKeeper(tlsConf(root, certs, false, "app"))) {
                assertEquals(all, ensembleOf(bk, folioLedger));
                RoundTripTest.readAllBack(bk.openLedger(javaLedger, DigestType.CRC32C, FolioCluster.PASSWORD),
                        javaSeed, count);
                RoundTripTest.readAllBack(bk.openLedger(folioLedger, DigestType.CRC32C, FolioCluster.PASSWORD),
                        folioLedger, count);
            }
            for (long[] l : new long[][] {{javaLedger, javaSeed}, {folioLedger, folioLedger}}) {
                List<byte[]> read = FolioCli.readLedgerOn(folioUri, l[0], tlsFlags);
                assertEquals(count, read.size());
                for (int i = 0; i < count; i++) {
                    assertArrayEquals(FolioCluster.payload(l[1], i), read.get(i), "ledger " + l[0] + " entry " + i);
                }
            }

            // The bookies refuse the Java client without an authorized certificate.
            for (String cert : new String[] {null, "guest"}) {
                try (BookKeeper bk = new BookKeeper(tlsConf(root, certs, false, cert))) {
                    LedgerHandle lh = bk.createLedger(4, 3, 2, DigestType.CRC32C, FolioCluster.PASSWORD);
                    assertThrows(BKException.class, () -> lh.addEntry(new byte[] {1, 2, 3}),
                            "an add without an authorized client certificate was acknowledged (" + cert + ")");
                }
            }
        } finally {
            for (TlsBookie b : folio) {
                b.close();
            }
            for (JavaBookie b : java) {
                b.stop();
            }
        }
    }

    static java.util.Set<String> ensembleOf(BookKeeper bk, long id) throws Exception {
        java.util.Set<String> s = new java.util.HashSet<>();
        for (java.util.List<org.apache.bookkeeper.net.BookieId> e
                : bk.getLedgerManager().readLedgerMetadata(id).get().getValue().getAllEnsembles().values()) {
            e.forEach(b -> s.add(b.toString()));
        }
        return s;
    }

    static String[] concat(String[] a, String[] b) {
        String[] out = java.util.Arrays.copyOf(a, a.length + b.length);
        System.arraycopy(b, 0, out, a.length, b.length);
        return out;
    }
}
