package dev.folio.interop;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.net.Socket;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.apache.bookkeeper.bookie.Cookie;
import org.apache.bookkeeper.client.BKException;
import org.apache.bookkeeper.client.BookKeeper;
import org.apache.bookkeeper.client.BookKeeper.DigestType;
import org.apache.bookkeeper.client.BookKeeperAdmin;
import org.apache.bookkeeper.client.LedgerHandle;
import org.apache.bookkeeper.client.api.LedgerMetadata;
import org.apache.bookkeeper.conf.ServerConfiguration;
import org.apache.bookkeeper.discover.RegistrationManager;
import org.apache.bookkeeper.meta.MetadataDrivers;
import org.apache.bookkeeper.net.BookieId;
import org.apache.bookkeeper.proto.OperationType;
import org.apache.bookkeeper.proto.Response;
import org.apache.bookkeeper.proto.StatusCode;
import org.apache.bookkeeper.versioning.Versioned;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * A mixed cluster: two Apache BookKeeper bookies (the same 4.18.2 artifacts as the client, with
 * DbLedgerStorage) join the three Folio bookies on the same ZooKeeper, under the instance id
 * Folio's {@code initnewcluster} wrote. Ledgers are E4/Qw3/Qa2 over the five, so every ensemble
 * holds both kinds (4 of 5 with only 3 Folio and 2 Java bookies) and leaves one spare for an
 * ensemble change. Both clients write, both read back byte for byte, after a close, after a
 * recovery, and after a Java bookie dies mid-ledger.
 */
class MixedClusterTest {
    static final int ENTRIES = 2000;
    static final List<JavaBookie> JAVA = new ArrayList<>();

    @BeforeAll
    static void startJavaBookies() throws Exception {
        try (BookKeeperAdmin admin = new BookKeeperAdmin(FolioCluster.conf(false))) {
            for (int i = 1; i <= 2; i++) {
                JAVA.add(JavaBookie.start(FolioCluster.workDir().resolve("java-bookie" + i)));
            }
            for (JavaBookie b : JAVA) {
                b.awaitRegistered(admin);
            }
        }
    }

    /**
     * BP-32's write close as Folio sends it (docs/formats/write-close.md: RANGE_ADD_ENTRY with a
     * writeCloseRequest at field 1000; the bytes pinned in folio-proto's v3_wire.rs), raw on one
     * socket: a Java bookie answers EBADREQ and keeps serving the connection (a second request
     * on it is answered too), so a Folio client on a mixed cluster loses nothing by sending it;
     * a Folio bookie answers it in kind (ENOLEDGER: it holds no such ledger).
     */
    @Test
    void writeCloseIsEbadreqOnJavaBookiesAndTheConnectionStays() throws Exception {
        for (JavaBookie b : JAVA) {
            try (Socket s = new Socket("127.0.0.1", b.port)) {
                s.setSoTimeout(60_000);
                for (int txn = 7; txn <= 8; txn++) {
                    Response r = exchange(s, writeClose(txn));
                    assertEquals(StatusCode.EBADREQ, r.getStatus(), b.id);
                    assertEquals(txn, r.getHeader().getTxnId(), b.id);
                    assertEquals(OperationType.RANGE_ADD_ENTRY, r.getHeader().getOperation(), b.id);
                }
            }
        }
        String folio = FolioCluster.bookies().get(0);
        int colon = folio.lastIndexOf(':');
        try (Socket s = new Socket(folio.substring(0, colon), Integer.parseInt(folio.substring(colon + 1)))) {
            s.setSoTimeout(60_000);
            Response r = exchange(s, writeClose(9));
            assertEquals(StatusCode.ENOLEDGER, r.getStatus(), folio);
            assertEquals(9, r.getHeader().getTxnId(), folio);
        }
    }

    /** A write close of ledger 987654321 (no such ledger) with a zero master key, txn {@code txn} < 128. */
    static byte[] writeClose(int txn) {
        // header: version 3, operation 4 (RANGE_ADD_ENTRY), txnId
        byte[] header = {0x0a, 0x06, 0x08, 0x03, 0x10, 0x04, 0x18, (byte) txn};
        // writeCloseRequest (field 1000, key 0xc2 0x3e): ledgerId 987654321 (varint), masterKey
        byte[] ledger = {0x08, (byte) 0xb1, (byte) 0xd1, (byte) 0xf9, (byte) 0xd6, 0x03};
        byte[] body = new byte[ledger.length + 2 + 20];
        System.arraycopy(ledger, 0, body, 0, ledger.length);
        body[ledger.length] = 0x12;
        body[ledger.length + 1] = 0x14;
        byte[] out = new byte[header.length + 3 + body.length];
        System.arraycopy(header, 0, out, 0, header.length);
        out[header.length] = (byte) 0xc2;
        out[header.length + 1] = 0x3e;
        out[header.length + 2] = (byte) body.length;
        System.arraycopy(body, 0, out, header.length + 3, body.length);
        return out;
    }

    /** Sends one v3 frame (4-byte big-endian length, then the body) and reads one back. */
    static Response exchange(Socket s, byte[] request) throws IOException {
        DataOutputStream out = new DataOutputStream(s.getOutputStream());
        out.writeInt(request.length);
        out.write(request);
        out.flush();
        DataInputStream in = new DataInputStream(s.getInputStream());
        byte[] frame = new byte[in.readInt()];
        in.readFully(frame);
        Response r = new Response();
        r.parseFrom(frame);
        return r;
    }

    /** The Java bookies' cookies (in ZooKeeper) carry the instance id Folio's initnewcluster wrote. */
    @Test
    void javaBookiesJoinFolioInstance() throws Exception {
        withRegistrationManager(rm -> {
            String instanceId = rm.getClusterInstanceId();
            for (JavaBookie b : JAVA) {
                String cookie = Cookie.readFromRegistrationManager(rm, BookieId.parse(b.id)).getValue().toString();
                assertTrue(cookie.contains("instanceId: \"" + instanceId + "\""), cookie);
                assertTrue(cookie.contains("bookieHost: \"" + b.id + "\""), cookie);
            }
        });
        Set<String> all = new HashSet<>(FolioCluster.bookies());
        all.addAll(javaIds());
        try (BookKeeperAdmin admin = new BookKeeperAdmin(FolioCluster.conf(false))) {
            Set<String> available = new HashSet<>();
            admin.getAvailableBookies().forEach(b -> available.add(b.toString()));
            assertEquals(all, available);
        }
    }

    interface RmAction {
        void run(RegistrationManager rm) throws Exception;
    }

    static void withRegistrationManager(RmAction action) throws Exception {
        ServerConfiguration conf = new ServerConfiguration();
        conf.setMetadataServiceUri(FolioCluster.javaMetadataUri());
        conf.setZkTimeout(30_000);
        MetadataDrivers.runFunctionWithRegistrationManager(conf, rm -> {
            try {
                action.run(rm);
                return null;
            } catch (Exception e) {
                throw new RuntimeException(e);
            }
        });
    }

    @AfterAll
    static void stopJavaBookies() throws Exception {
        for (JavaBookie b : JAVA) {
            b.stop();
        }
        // The other test classes expect the three Folio bookies only: wait for the
        // registrations to go, and remove the cookies (BookKeeper lists all bookies from them).
        try (BookKeeperAdmin admin = new BookKeeperAdmin(FolioCluster.conf(false))) {
            for (JavaBookie b : JAVA) {
                b.awaitUnregistered(admin);
            }
        }
        withRegistrationManager(rm -> {
            for (JavaBookie b : JAVA) {
                BookieId id = BookieId.parse(b.id);
                Versioned<Cookie> cookie = Cookie.readFromRegistrationManager(rm, id);
                cookie.getValue().deleteFromRegistrationManager(rm, id, cookie.getVersion());
            }
        });
        JAVA.clear();
    }

    static Set<String> javaIds() {
        Set<String> s = new HashSet<>();
        for (JavaBookie b : JAVA) {
            s.add(b.id);
        }
        return s;
    }

    /** Every ensemble of the ledger holds Folio and Java bookies, and nothing else. */
    static void assertMixed(LedgerMetadata md) {
        Set<String> folio = new HashSet<>(FolioCluster.bookies());
        Set<String> java = javaIds();
        assertEquals(4, md.getEnsembleSize());
        assertEquals(3, md.getWriteQuorumSize());
        assertEquals(2, md.getAckQuorumSize());
        for (List<BookieId> ensemble : md.getAllEnsembles().values()) {
            int f = 0;
            int j = 0;
            for (BookieId b : ensemble) {
                if (folio.contains(b.toString())) {
                    f++;
                } else if (java.contains(b.toString())) {
                    j++;
                } else {
                    throw new AssertionError("ensemble member " + b + " is neither a Folio nor a Java bookie");
                }
            }
            assertTrue(f > 0 && j > 0, "ensemble " + ensemble + " is not mixed");
        }
    }

    /** Both clients read the closed ledger back byte for byte: Java (recovery open) and `folio ledger read`. */
    static void bothRead(long id, DigestType digest, boolean v2, long seed, int count) throws Exception {
        try (BookKeeper bk = new BookKeeper(FolioCluster.conf(v2))) {
            LedgerHandle lh = bk.openLedger(id, digest, FolioCluster.PASSWORD);
            assertTrue(lh.isClosed());
            assertEquals(count - 1, lh.getLastAddConfirmed());
            assertEquals(FolioCluster.totalLength(seed, count), lh.getLength());
            assertMixed(lh.getLedgerMetadata());
            RoundTripTest.readAllBack(lh, seed, count);
        }
        List<byte[]> read = FolioCli.readLedger(id);
        assertEquals(count, read.size());
        for (int i = 0; i < count; i++) {
            assertArrayEquals(FolioCluster.payload(seed, i), read.get(i), "payload of entry " + i);
        }
    }

    @ParameterizedTest(name = "v2={0} {1}")
    @CsvSource({"false,CRC32C", "true,CRC32", "false,MAC", "true,MAC"})
    void javaWritesMixedEnsemble(boolean v2, String digestName) throws Exception {
        DigestType digest = DigestType.valueOf(digestName);
        long seed = System.nanoTime();
        long id;
        try (BookKeeper bk = new BookKeeper(FolioCluster.conf(v2))) {
            LedgerHandle lh = bk.createLedger(4, 3, 2, digest, FolioCluster.PASSWORD);
            id = lh.getId();
            assertMixed(lh.getLedgerMetadata());
            RoundTripTest.appendAll(lh, seed, ENTRIES);
            lh.close();
        }
        bothRead(id, digest, v2, seed, ENTRIES);
    }

    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"CRC32", "CRC32C", "MAC"})
    void folioWritesMixedEnsemble(String digestName) throws Exception {
        DigestType digest = DigestType.valueOf(digestName);
        long seed = System.nanoTime();
        long id;
        try (FolioCli w = FolioCli.start("ledger", "write", "-e", "4", "-w", "3", "-a", "2",
                "--digest", FolioCliInteropTest.cliDigest(digest), "--password", FolioCli.PASSWORD, "--hex")) {
            id = Long.parseLong(w.expect("ledger"));
            for (int i = 0; i < ENTRIES; i++) {
                w.writeEntry(FolioCluster.payload(seed, i));
            }
            w.stdin.close();
            for (int i = 0; i < ENTRIES; i++) {
                assertEquals(Integer.toString(i), w.expect("acked"));
            }
            assertEquals(Integer.toString(ENTRIES - 1), w.expect("closed"));
            assertEquals(0, w.waitFor());
        }
        bothRead(id, digest, true, seed, ENTRIES);
    }

    /** A live Java writer on a mixed ensemble is fenced by Folio's recovery (which fences Java bookies too). */
    @ParameterizedTest(name = "v2={0}")
    @ValueSource(booleans = {false, true})
    void folioRecoversJavaWriter(boolean v2) throws Exception {
        long seed = System.nanoTime();
        int count = 500;
        long id;
        try (BookKeeper bk = new BookKeeper(FolioCluster.conf(v2))) {
            LedgerHandle w = bk.createLedger(4, 3, 2, DigestType.CRC32C, FolioCluster.PASSWORD);
            id = w.getId();
            RoundTripTest.appendAll(w, seed, count);
            List<byte[]> read = FolioCli.readLedger(id);
            assertEquals(count, read.size());
            for (int i = 0; i < count; i++) {
                assertArrayEquals(FolioCluster.payload(seed, i), read.get(i), "payload of entry " + i);
            }
            assertThrows(BKException.BKLedgerFencedException.class,
                    () -> w.addEntry(FolioCluster.payload(seed, count)));
        }
        bothRead(id, DigestType.CRC32C, v2, seed, count);
    }

    /** A Folio writer killed mid-ledger on a mixed ensemble: Java's recovery open finds every acked entry. */
    @Test
    void javaRecoversKilledFolioWriter() throws Exception {
        long seed = System.nanoTime();
        int count = 500;
        long id;
        try (FolioCli w = FolioCli.start("ledger", "write", "-e", "4", "-w", "3", "-a", "2",
                "--digest", "crc32", "--password", FolioCli.PASSWORD, "--hex")) {
            id = Long.parseLong(w.expect("ledger"));
            for (int i = 0; i < count; i++) {
                w.writeEntry(FolioCluster.payload(seed, i));
            }
            for (int i = 0; i < count; i++) {
                assertEquals(Integer.toString(i), w.expect("acked"));
            }
            w.process.destroyForcibly();
            w.process.waitFor(60, TimeUnit.SECONDS);
        }
        bothRead(id, DigestType.CRC32, false, seed, count);
    }

    /** The Java bookie of an ensemble that holds one, or the first one. */
    static JavaBookie javaBookieIn(LedgerMetadata md) {
        for (BookieId b : md.getAllEnsembles().get(0L)) {
            for (JavaBookie j : JAVA) {
                if (j.id.equals(b.toString())) {
                    return j;
                }
            }
        }
        throw new AssertionError("no Java bookie in " + md.getAllEnsembles());
    }

    /** Brings a stopped Java bookie back (same directories and cookie) so later tests have five bookies. */
    static void restartJavaBookie(JavaBookie b) throws Exception {
        b.restart();
        try (BookKeeperAdmin admin = new BookKeeperAdmin(FolioCluster.conf(false))) {
            b.awaitRegistered(admin);
        }
    }

    /**
     * A Java bookie of the ensemble stops mid-ledger: the Java writer replaces it with the spare
     * bookie (an ensemble change), closes, and both clients read every entry back.
     */
    @ParameterizedTest(name = "v2={0}")
    @ValueSource(booleans = {false, true})
    void javaWriterSurvivesJavaBookieLoss(boolean v2) throws Exception {
        long seed = System.nanoTime();
        int count = 1000;
        long id;
        JavaBookie victim;
        try (BookKeeper bk = new BookKeeper(FolioCluster.conf(v2))) {
            LedgerHandle lh = bk.createLedger(4, 3, 2, DigestType.CRC32C, FolioCluster.PASSWORD);
            id = lh.getId();
            for (int i = 0; i < count / 2; i++) {
                assertEquals(i, lh.addEntry(FolioCluster.payload(seed, i)));
            }
            victim = javaBookieIn(lh.getLedgerMetadata());
            victim.stop();
            for (int i = count / 2; i < count; i++) {
                assertEquals(i, lh.addEntry(FolioCluster.payload(seed, i)));
            }
            assertTrue(lh.getLedgerMetadata().getAllEnsembles().size() >= 2,
                    "no ensemble change after " + victim.id + " stopped");
            for (List<BookieId> e : lh.getLedgerMetadata().getAllEnsembles().tailMap(1L).values()) {
                assertTrue(e.stream().noneMatch(b -> b.toString().equals(victim.id)),
                        "stopped bookie " + victim.id + " still in a later ensemble " + e);
            }
            lh.close();
        }
        try {
            bothReadAnyEnsemble(id, DigestType.CRC32C, v2, seed, count);
        } finally {
            restartJavaBookie(victim);
        }
    }

    /**
     * A Java bookie of the ensemble stops while the Folio client writes: Folio's writer replaces
     * it, and both clients read every entry back.
     */
    @Test
    void folioWriterSurvivesJavaBookieLoss() throws Exception {
        long seed = System.nanoTime();
        int count = 1000;
        long id;
        JavaBookie victim;
        try (FolioCli w = FolioCli.start("ledger", "write", "-e", "4", "-w", "3", "-a", "2",
                "--digest", "crc32c", "--password", FolioCli.PASSWORD, "--hex");
                BookKeeper bk = new BookKeeper(FolioCluster.conf(false))) {
            id = Long.parseLong(w.expect("ledger"));
            for (int i = 0; i < count / 2; i++) {
                w.writeEntry(FolioCluster.payload(seed, i));
            }
            for (int i = 0; i < count / 2; i++) {
                assertEquals(Integer.toString(i), w.expect("acked"));
            }
            victim = javaBookieIn(bk.getLedgerManager().readLedgerMetadata(id).get().getValue());
            victim.stop();
            for (int i = count / 2; i < count; i++) {
                w.writeEntry(FolioCluster.payload(seed, i));
            }
            w.stdin.close();
            for (int i = count / 2; i < count; i++) {
                assertEquals(Integer.toString(i), w.expect("acked"));
            }
            assertEquals(Integer.toString(count - 1), w.expect("closed"));
            assertEquals(0, w.waitFor());
            LedgerMetadata md = bk.getLedgerManager().readLedgerMetadata(id).get().getValue();
            assertTrue(md.getAllEnsembles().size() >= 2, "no ensemble change after " + victim.id + " stopped");
        }
        try {
            bothReadAnyEnsemble(id, DigestType.CRC32C, true, seed, count);
        } finally {
            restartJavaBookie(victim);
        }
    }

    /** {@link #bothRead} without the every-ensemble-is-mixed check (after an ensemble change). */
    static void bothReadAnyEnsemble(long id, DigestType digest, boolean v2, long seed, int count) throws Exception {
        bothRead(id, digest, v2, seed, count, false);
    }

    static void bothRead(long id, DigestType digest, boolean v2, long seed, int count, boolean mixed)
            throws Exception {
        if (mixed) {
            bothRead(id, digest, v2, seed, count);
            return;
        }
        try (BookKeeper bk = new BookKeeper(FolioCluster.conf(v2))) {
            LedgerHandle lh = bk.openLedger(id, digest, FolioCluster.PASSWORD);
            assertTrue(lh.isClosed());
            assertEquals(count - 1, lh.getLastAddConfirmed());
            RoundTripTest.readAllBack(lh, seed, count);
        }
        List<byte[]> read = FolioCli.readLedger(id);
        assertEquals(count, read.size());
        for (int i = 0; i < count; i++) {
            assertArrayEquals(FolioCluster.payload(seed, i), read.get(i), "payload of entry " + i);
        }
    }
}
