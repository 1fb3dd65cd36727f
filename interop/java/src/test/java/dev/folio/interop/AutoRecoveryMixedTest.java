package dev.folio.interop;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Enumeration;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.Callable;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.bookkeeper.bookie.Cookie;
import org.apache.bookkeeper.client.BookKeeper;
import org.apache.bookkeeper.client.BookKeeper.DigestType;
import org.apache.bookkeeper.client.BookKeeperAdmin;
import org.apache.bookkeeper.client.LedgerEntry;
import org.apache.bookkeeper.client.LedgerHandle;
import org.apache.bookkeeper.client.api.LedgerMetadata;
import org.apache.bookkeeper.conf.ClientConfiguration;
import org.apache.bookkeeper.meta.LedgerUnderreplicationManager;
import org.apache.bookkeeper.meta.ZkLedgerUnderreplicationManager;
import org.apache.bookkeeper.net.BookieId;
import org.apache.bookkeeper.proto.OperationType;
import org.apache.bookkeeper.proto.ProtocolVersion;
import org.apache.bookkeeper.proto.Request;
import org.apache.bookkeeper.proto.Response;
import org.apache.bookkeeper.proto.StatusCode;
import org.apache.bookkeeper.versioning.Versioned;
import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.Watcher;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.ZooKeeper;
import org.apache.zookeeper.data.Stat;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;

/**
 * BookKeeper's own autorecovery ({@code AutoRecoveryMain} 4.18.2 in child JVMs) and Folio's
 * ({@code folio autorecovery}) in one cluster: the three Folio bookies of the interop cluster,
 * a fourth Folio bookie and four Apache BookKeeper bookies (child JVMs) started here. In order:
 * (a) one Auditor among both kinds, each kind taking over when the other's Auditor goes, with
 * votes byte-identical in the election znode; (b) BookKeeper's ReplicationWorker, alone,
 * re-replicates a ledger on Folio bookies only after one of them is gone for good; (c) Folio's
 * worker, alone, one on BookKeeper bookies only after one of them is gone, copying it to another
 * BookKeeper bookie; (d) with both kinds
 * running, six ledgers that lose a bookie are repaired by both kinds from the one queue, and a
 * lock znode written in BookKeeper's format (its own {@code getLockData()}) keeps both away from
 * its ledger until it goes. Every repaired ledger is checked on each bookie of every write set
 * (a raw v3 read per bookie), and read whole by the Java client and by {@code folio ledger read}.
 */
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class AutoRecoveryMixedTest {
    static final int ENTRIES = 300;
    static final String UR = "/underreplication";
    /** Seconds a repair may take (generous: the machine is shared); lower only to see a failure sooner. */
    static final int REPAIR_TIMEOUT = Integer.getInteger("folio.repairTimeout", 900);

    static Path work;
    static ZooKeeper zk;
    static BookKeeper bk;
    static BookKeeperAdmin admin;
    static LedgerUnderreplicationManager urm;
    static final List<JavaAutoRecovery> JAVA_AR = new ArrayList<>();
    static final List<FolioAutoRecovery> FOLIO_AR = new ArrayList<>();
    static final List<JavaBookie> JAVA = new ArrayList<>();
    static FolioCli folioBookie;
    static String folioBookieId;
    static final List<Long> LEDGERS = new ArrayList<>();
    static final Map<Long, Integer> LENGTHS = new HashMap<>();

    /** {@code folio autorecovery} with its log (INFO for autorecovery) in a file. */
    record FolioAutoRecovery(FolioCli cli, String id, Path log) {
        List<String> logLines() throws IOException {
            return Files.exists(log) ? Files.readAllLines(log) : List.of();
        }

        void stop() throws InterruptedException {
            if (cli.process.isAlive()) {
                cli.process.destroy();
                cli.waitFor();
            }
        }
    }

    // ---------------------------------------------------------------- set-up and clean-up

    @BeforeAll
    static void connect() throws Exception {
        work = FolioCluster.workDir().resolve("autorecovery-mixed");
        Files.createDirectories(work);
        CountDownLatch connected = new CountDownLatch(1);
        zk = new ZooKeeper(FolioCluster.zk(), 30_000, e -> {
            if (e.getState() == Watcher.Event.KeeperState.SyncConnected) {
                connected.countDown();
            }
        });
        assertTrue(connected.await(60, TimeUnit.SECONDS), "ZooKeeper connection");
        ClientConfiguration conf = FolioCluster.conf(false);
        conf.setEnsemblePlacementPolicy(PinnedPlacementPolicy.class);
        bk = new BookKeeper(conf);
        admin = new BookKeeperAdmin(FolioCluster.conf(false));
        urm = bk.getLedgerManagerFactory().newLedgerUnderreplicationManager();
        if (!urm.isLedgerReplicationEnabled()) {
            urm.enableLedgerReplication();
        }
        admin.setLostBookieRecoveryDelay(0);
        // No candidate of an earlier test class is left in the election.
        waitUntil("the Auditor election is empty", 120, () -> votes().isEmpty());
    }

    @AfterAll
    static void cleanUp() throws Exception {
        for (JavaAutoRecovery a : JAVA_AR) {
            a.stop();
        }
        for (FolioAutoRecovery a : FOLIO_AR) {
            a.stop();
        }
        if (folioBookie != null) {
            folioBookie.process.destroy();
            folioBookie.waitFor();
        }
        for (JavaBookie b : JAVA) {
            b.stop();
        }
        PinnedPlacementPolicy.allowed = null;
        // Leave nothing that names the bookies of this class: its ledgers, marks, cookies.
        for (long id : LEDGERS) {
            try {
                bk.deleteLedger(id);
            } catch (Exception e) {
                // Already gone.
            }
            deleteIfExists(markPath(id));
            deleteIfExists(lockPath(id));
        }
        List<String> gone = new ArrayList<>();
        for (JavaBookie b : JAVA) {
            b.awaitUnregistered(admin);
            gone.add(b.id);
        }
        if (folioBookieId != null) {
            gone.add(folioBookieId);
        }
        MixedClusterTest.withRegistrationManager(rm -> {
            for (String id : gone) {
                try {
                    Versioned<Cookie> c = Cookie.readFromRegistrationManager(rm, BookieId.parse(id));
                    c.getValue().deleteFromRegistrationManager(rm, BookieId.parse(id), c.getVersion());
                } catch (Exception e) {
                    // No cookie.
                }
            }
        });
        urm.close();
        admin.close();
        bk.close();
        zk.close();
    }

    static void deleteIfExists(String path) throws Exception {
        try {
            zk.delete(path, -1);
        } catch (KeeperException.NoNodeException e) {
            // Gone.
        }
    }

    // ---------------------------------------------------------------- the tests

    /**
     * (a) One Auditor among both kinds: BookKeeper's AutoRecoveryMain, first, is elected; a
     * Folio candidate joins behind it and does not act; BookKeeper's goes and Folio's takes over;
     * a second BookKeeper candidate waits behind Folio's, and takes over when Folio's goes.
     */
    @Test
    @Order(1)
    void oneAuditorAmongBothKinds() throws Exception {
        JavaAutoRecovery java1 = startJavaAutoRecovery("java-autorecovery1");
        waitUntil("BookKeeper's AutoRecoveryMain is the Auditor", 300, () -> java1.id.equals(auditor()));
        waitUntil("BookKeeper's Auditor started", 120,
                () -> count(java1.logLines(), "I'm starting as Auditor Bookie") == 1);
        FolioAutoRecovery folio1 = startFolioAutoRecovery("folio-autorecovery1");
        waitUntil("two votes", 120, () -> votes().size() == 2);
        // The votes are byte for byte the same format; the elected one is also in the election znode.
        assertEquals(List.of(java1.id, folio1.id), List.copyOf(votes().values()));
        assertArrayEquals(vote(java1.id), zk.getData(UR_ROOT() + "/auditorelection", false, null));
        Thread.sleep(5_000);
        assertEquals(java1.id, auditor());
        assertEquals(java1.id, admin.getCurrentAuditor().toString());
        assertEquals(0, count(folio1.logLines(), "elected Auditor"), "Folio's candidate acts as Auditor too");

        java1.stop();
        waitUntil("Folio's autorecovery takes over as Auditor", 300, () -> folio1.id.equals(auditor()));
        waitUntil("Folio's Auditor started", 120, () -> count(folio1.logLines(), "elected Auditor") == 1);
        assertArrayEquals(vote(folio1.id), zk.getData(UR_ROOT() + "/auditorelection", false, null));

        JavaAutoRecovery java2 = startJavaAutoRecovery("java-autorecovery2");
        waitUntil("two votes again", 300, () -> votes().size() == 2);
        assertEquals(List.of(folio1.id, java2.id), List.copyOf(votes().values()));
        Thread.sleep(5_000);
        assertEquals(folio1.id, admin.getCurrentAuditor().toString());
        assertEquals(0, count(java2.logLines(), "I'm starting as Auditor Bookie"),
                "BookKeeper's candidate acts as Auditor too");

        folio1.stop();
        waitUntil("BookKeeper's AutoRecoveryMain takes over as Auditor", 300, () -> java2.id.equals(auditor()));
        waitUntil("BookKeeper's Auditor started", 120,
                () -> count(java2.logLines(), "I'm starting as Auditor Bookie") == 1);
        assertArrayEquals(vote(java2.id), zk.getData(UR_ROOT() + "/auditorelection", false, null));
    }

    /**
     * (b) BookKeeper's ReplicationWorker (and Auditor) alone, no Java bookie in the cluster: a
     * ledger on three Folio bookies loses one for good; BookKeeper's worker copies its entries to
     * the fourth Folio bookie.
     */
    @Test
    @Order(2)
    void bookkeepersWorkerRepairsALedgerOnFolioBookies() throws Exception {
        JavaAutoRecovery java = JAVA_AR.get(JAVA_AR.size() - 1);
        assertTrue(java.alive(), "BookKeeper's autorecovery from (a) is running");
        startFolioBookie();
        List<String> folio = FolioCluster.bookies();
        Set<String> ensemble = Set.of(folio.get(0), folio.get(1), folioBookieId);
        PinnedPlacementPolicy.allow(ensemble);
        long id = write(ENTRIES);
        assertEquals(ensemble, bookiesOf(metadata(id)));

        folioBookie.process.destroy();
        assertEquals(0, folioBookie.waitFor(), "the Folio bookie stops cleanly");
        waitUntil("the lost Folio bookie is unregistered", 120,
                () -> !available().contains(folioBookieId));
        waitRepaired(id, folioBookieId);
        assertEquals(new HashSet<>(folio), bookiesOf(metadata(id)), "re-replicated to the other Folio bookie");
        assertEverywhere(id);
        assertTrue(repairedBy(java).contains(id), "BookKeeper's worker logs the repair:\n" + java.tail());
    }

    /**
     * (c) Folio's worker (and Auditor) alone: a ledger on three BookKeeper bookies loses one for
     * good; Folio's worker reads the BookKeeper bookies and copies their entries to a fourth
     * BookKeeper bookie, which its rack-aware placement ({@code --rack-mapping-file}: the
     * fourth is the only bookie on a rack of its own that the ledger's write sets do not use)
     * picks.
     */
    @Test
    @Order(3)
    void foliosWorkerRepairsALedgerOnBookKeeperBookies() throws Exception {
        for (int i = 1; i <= 4; i++) {
            JAVA.add(JavaBookie.start(work.resolve("java-bookie" + i)));
        }
        for (JavaBookie b : JAVA) {
            b.awaitRegistered(admin);
        }
        // Folio's bookies publish no rack, so only a mapped bookie on a rack the write sets do
        // not use is preferred: the fourth BookKeeper bookie.
        Path racks = work.resolve("racks.txt");
        StringBuilder map = new StringBuilder();
        for (int i = 0; i < 4; i++) {
            map.append(JAVA.get(i).id).append(" /dc/rack-").append(i + 1).append('\n');
        }
        Files.writeString(racks, map.toString());
        FolioAutoRecovery folio = startFolioAutoRecovery("folio-autorecovery2", "--rack-mapping-file",
                racks.toString());
        for (JavaAutoRecovery a : JAVA_AR) {
            a.stop();
        }
        waitUntil("Folio's autorecovery is the Auditor", 300, () -> folio.id.equals(auditor()));

        Set<String> ensemble = Set.of(JAVA.get(0).id, JAVA.get(1).id, JAVA.get(2).id);
        PinnedPlacementPolicy.allow(ensemble);
        long id = write(ENTRIES);
        assertEquals(ensemble, bookiesOf(metadata(id)));

        JavaBookie lost = JAVA.get(2);
        lost.stop();
        lost.awaitUnregistered(admin);
        waitRepaired(id, lost.id);
        Set<String> now = bookiesOf(metadata(id));
        assertTrue(now.contains(JAVA.get(0).id) && now.contains(JAVA.get(1).id), now.toString());
        assertEverywhere(id);
        assertTrue(repairedBy(folio).contains(id), "Folio's worker logs the repair");
        Set<String> targets = new HashSet<>(now);
        targets.removeAll(ensemble);
        assertEquals(Set.of(JAVA.get(3).id), targets, "Folio's worker copies to the fourth BookKeeper bookie");
        System.err.println("AutoRecoveryMixedTest (c): Folio's worker re-replicated ledger " + id
                + " from BookKeeper bookies to the BookKeeper bookie " + targets);
    }

    /**
     * (d) Both kinds running, Folio's the Auditor: six ledgers over Folio and BookKeeper bookies
     * lose a BookKeeper bookie; the one whose lock znode this test holds (BookKeeper's lock
     * format) is left alone by both while the five others are repaired, each by one of the two
     * workers (their logs, and the session of the lock znodes seen while they work, say which);
     * then the lock goes and it is repaired too, and the queue holds none of them.
     */
    @Test
    @Order(4)
    void bothWorkersShareOneQueueAndHonourLocks() throws Exception {
        FolioAutoRecovery folio = FOLIO_AR.get(FOLIO_AR.size() - 1);
        assertTrue(folio.cli.process.isAlive(), "Folio's autorecovery from (c) is running");
        assertEquals(4, JAVA.size(), "the BookKeeper bookies of (c)");
        JavaAutoRecovery java = startJavaAutoRecovery("java-autorecovery3");
        waitUntil("both kinds in the election", 300, () -> votes().size() == 2);
        assertEquals(folio.id, auditor());

        List<String> folioBookies = FolioCluster.bookies();
        JavaBookie lost = JAVA.get(1);
        List<Long> ids = new ArrayList<>();
        for (int i = 0; i < 6; i++) {
            Set<String> ensemble = Set.of(folioBookies.get(i % 3), JAVA.get(0).id, lost.id);
            PinnedPlacementPolicy.allow(ensemble);
            long id = write(ENTRIES);
            assertEquals(ensemble, bookiesOf(metadata(id)));
            ids.add(id);
        }
        long held = ids.get(0);
        // A lock in BookKeeper's format, as a third worker would hold it, before the mark exists.
        zk.create(lockPath(held), ZkLedgerUnderreplicationManager.getLockData(), ZooDefs.Ids.OPEN_ACL_UNSAFE,
                CreateMode.EPHEMERAL);

        // Which session holds each lock while the workers work: the vote of the same session
        // names the process.
        Map<Long, String> lockOwners = new ConcurrentHashMap<>();
        AtomicBoolean watching = new AtomicBoolean(true);
        Thread watcher = new Thread(() -> {
            while (watching.get()) {
                try {
                    Map<Long, String> sessions = new HashMap<>();
                    for (String v : zk.getChildren(UR_ROOT() + "/auditorelection", false)) {
                        Stat s = new Stat();
                        byte[] d = zk.getData(UR_ROOT() + "/auditorelection/" + v, false, s);
                        sessions.put(s.getEphemeralOwner(), voteId(d));
                    }
                    for (String l : zk.getChildren(UR_ROOT() + "/locks", false)) {
                        Stat s = zk.exists(UR_ROOT() + "/locks/" + l, false);
                        if (s != null && l.startsWith("urL")) {
                            String owner = sessions.getOrDefault(s.getEphemeralOwner(),
                                    s.getEphemeralOwner() == zk.getSessionId() ? "test" : "other");
                            lockOwners.merge(Long.parseLong(l.substring(3)), owner,
                                    (a, b) -> a.contains(b) ? a : a + "," + b);
                        }
                    }
                    Thread.sleep(50);
                } catch (Exception e) {
                    // A node went between the listing and the read: look again.
                }
            }
        }, "lock-watcher");
        watcher.setDaemon(true);
        watcher.start();

        lost.stop();
        lost.awaitUnregistered(admin);
        for (long id : ids.subList(1, ids.size())) {
            waitRepaired(id, lost.id);
        }
        // Both workers have been free for a while: neither took the locked ledger.
        Thread.sleep(10_000);
        assertNotNull(urm.getLedgerUnreplicationInfo(held), "the held ledger is still marked");
        assertTrue(bookiesOf(metadata(held)).contains(lost.id), "the held ledger was left alone");
        assertFalse(repairedBy(java).contains(held) || repairedBy(folio).contains(held));
        zk.delete(lockPath(held), -1);
        waitRepaired(held, lost.id);
        watching.set(false);
        watcher.join(10_000);

        Set<Long> byJava = new HashSet<>(repairedBy(java));
        byJava.retainAll(ids);
        Set<Long> byFolio = new HashSet<>(repairedBy(folio));
        byFolio.retainAll(ids);
        System.err.println("AutoRecoveryMixedTest (d): BookKeeper's worker " + java.id + " repaired " + byJava
                + ", Folio's " + folio.id + " " + byFolio + "; lock holders seen " + new TreeMap<>(lockOwners)
                + " (BookKeeper " + java.id + ", Folio " + folio.id + ")");
        // Only the two workers (and this test, for the held one) ever held these ledgers' locks.
        assertTrue(lockOwners.getOrDefault(held, "").startsWith("test"), lockOwners.toString());
        for (long id : ids) {
            for (String owner : lockOwners.getOrDefault(id, "").split(",")) {
                assertTrue(Set.of("", "test", java.id, folio.id).contains(owner), "lock of " + id + " held by " + owner);
            }
            assertTrue(byJava.contains(id) || byFolio.contains(id), "no worker logs the repair of " + id);
            assertEverywhere(id);
            assertEquals(null, urm.getLedgerUnreplicationInfo(id));
        }
        assertFalse(byJava.isEmpty(), "BookKeeper's worker repaired none of " + ids);
        assertFalse(byFolio.isEmpty(), "Folio's worker repaired none of " + ids);
    }

    // ---------------------------------------------------------------- processes

    static JavaAutoRecovery startJavaAutoRecovery(String name) throws IOException {
        JavaAutoRecovery a = JavaAutoRecovery.start(work.resolve(name));
        JAVA_AR.add(a);
        return a;
    }

    static FolioAutoRecovery startFolioAutoRecovery(String name, String... extra) throws Exception {
        String id = "127.0.0.1:" + JavaBookie.freePort();
        Path log = work.resolve(name + ".log");
        List<String> args = new ArrayList<>(List.of("autorecovery", "--id", id,
                "--open-ledger-grace-period-ms", "5000", "--check-all-ledgers-interval", "0"));
        args.addAll(List.of(extra));
        FolioCli cli = FolioCli.startLogged(log, Map.of("FOLIO_LOG", "folio_autorecovery=info,warn"),
                args.toArray(new String[0]));
        FolioAutoRecovery a = new FolioAutoRecovery(cli, id, log);
        FOLIO_AR.add(a);
        String l;
        while ((l = cli.nextLine()) != null && !l.equals("ready")) {
            // "autorecovery <id> running on <uri>"
        }
        assertEquals("ready", l, "folio autorecovery did not start");
        return a;
    }

    /** A fourth Folio bookie, on a free port, for (b) to lose. */
    static void startFolioBookie() throws Exception {
        Path dir = work.resolve("folio-bookie4");
        Files.createDirectories(dir);
        Path conf = work.resolve("folio-bookie4.toml");
        Files.writeString(conf, "listen_address = \"127.0.0.1\"\ndisk_usage_threshold = 0.999\n"
                + "disk_usage_lwm_threshold = 0.998\n");
        folioBookie = FolioCli.start("bookie", "--config", conf.toString(), "--data-dir", dir.toString(),
                "--port", "0");
        String l;
        while ((l = folioBookie.nextLine()) != null && !l.equals("ready")) {
            Matcher m = Pattern.compile("^bookie (\\S+) listening on .*").matcher(l);
            if (m.matches()) {
                folioBookieId = m.group(1);
            }
        }
        assertEquals("ready", l, "the fourth Folio bookie did not start");
        assertNotNull(folioBookieId);
        waitUntil("the fourth Folio bookie is registered", 120, () -> available().contains(folioBookieId));
    }

    // ---------------------------------------------------------------- the election

    static String UR_ROOT() {
        return FolioCluster.ledgersRoot() + UR;
    }

    /** BookKeeper's AuditorVoteFormat, text: what both kinds must write. */
    static byte[] vote(String id) {
        return ("bookieId: \"" + id + "\"\n").getBytes(StandardCharsets.UTF_8);
    }

    static String voteId(byte[] data) {
        String s = new String(data, StandardCharsets.UTF_8);
        Matcher m = Pattern.compile("^bookieId: \"([^\"]+)\"\n$").matcher(s);
        if (!m.matches()) {
            throw new AssertionError("not an AuditorVoteFormat: " + s);
        }
        return m.group(1);
    }

    /** The votes, by sequence number; each must be exactly BookKeeper's format. */
    static TreeMap<String, String> votes() throws Exception {
        TreeMap<String, String> out = new TreeMap<>();
        List<String> children;
        try {
            children = zk.getChildren(UR_ROOT() + "/auditorelection", false);
        } catch (KeeperException.NoNodeException e) {
            return out;
        }
        for (String c : children) {
            try {
                byte[] d = zk.getData(UR_ROOT() + "/auditorelection/" + c, false, null);
                String id = voteId(d);
                assertArrayEquals(vote(id), d);
                out.put(c, id);
            } catch (KeeperException.NoNodeException e) {
                // Gone meanwhile.
            }
        }
        return out;
    }

    static String auditor() throws Exception {
        BookieId a = admin.getCurrentAuditor();
        return a == null ? null : a.toString();
    }

    // ---------------------------------------------------------------- ledgers and marks

    static long write(int entries) throws Exception {
        // The client learns of a bookie that just registered a little later than the admin saw it.
        LedgerHandle lh = null;
        for (int attempt = 0; lh == null; attempt++) {
            try {
                lh = bk.createLedger(3, 2, 2, DigestType.CRC32C, FolioCluster.PASSWORD);
            } catch (org.apache.bookkeeper.client.BKException.BKNotEnoughBookiesException e) {
                if (attempt >= 300) {
                    throw e;
                }
                Thread.sleep(200);
            }
        }
        long id = lh.getId();
        LEDGERS.add(id);
        List<java.util.concurrent.CompletableFuture<Long>> acks = new ArrayList<>();
        for (int i = 0; i < entries; i++) {
            acks.add(lh.appendAsync(FolioCluster.payload(id, i)));
        }
        for (int i = 0; i < entries; i++) {
            assertEquals(i, acks.get(i).get(300, TimeUnit.SECONDS));
        }
        lh.close();
        LENGTHS.put(id, entries);
        return id;
    }

    static LedgerMetadata metadata(long id) throws Exception {
        return bk.getLedgerManager().readLedgerMetadata(id).get(120, TimeUnit.SECONDS).getValue();
    }

    static Set<String> bookiesOf(LedgerMetadata md) {
        Set<String> s = new HashSet<>();
        for (List<BookieId> e : md.getAllEnsembles().values()) {
            for (BookieId b : e) {
                s.add(b.toString());
            }
        }
        return s;
    }

    static Set<String> available() throws Exception {
        Set<String> s = new HashSet<>();
        admin.getAvailableBookies().forEach(b -> s.add(b.toString()));
        return s;
    }

    static String markPath(long id) {
        return UR_ROOT() + "/ledgers/" + String.format("%04x/%04x/%04x/%04x/urL%010d",
                (id >> 48) & 0xffff, (id >> 32) & 0xffff, (id >> 16) & 0xffff, id & 0xffff, id);
    }

    static String lockPath(long id) {
        return UR_ROOT() + "/locks/" + String.format("urL%010d", id);
    }

    /** Waits until the ledger's metadata no longer names {@code lost} and its mark is gone. */
    static void waitRepaired(long id, String lost) throws Exception {
        waitUntil("ledger " + id + " re-replicated off " + lost + " and its mark cleared", REPAIR_TIMEOUT,
                () -> !bookiesOf(metadata(id)).contains(lost) && urm.getLedgerUnreplicationInfo(id) == null);
    }

    /**
     * Every entry of the closed ledger, on each bookie of its write set in the metadata (a raw v3
     * read per bookie), byte for byte; and the whole ledger read back by the Java client and by
     * {@code folio ledger read}.
     */
    static void assertEverywhere(long id) throws Exception {
        LedgerMetadata md = metadata(id);
        int n = LENGTHS.get(id);
        assertTrue(md.isClosed());
        assertEquals(n - 1, md.getLastEntryId());
        int e = md.getEnsembleSize();
        int qw = md.getWriteQuorumSize();
        Map<String, Socket> sockets = new HashMap<>();
        try {
            for (long entry = 0; entry < n; entry++) {
                List<BookieId> ensemble = md.getAllEnsembles().floorEntry(entry).getValue();
                byte[] payload = FolioCluster.payload(id, (int) entry);
                for (int i = 0; i < qw; i++) {
                    String b = ensemble.get((int) ((entry + i) % e)).toString();
                    Socket s = sockets.get(b);
                    if (s == null) {
                        int colon = b.lastIndexOf(':');
                        s = new Socket(b.substring(0, colon), Integer.parseInt(b.substring(colon + 1)));
                        s.setSoTimeout(120_000);
                        s.setTcpNoDelay(true);
                        sockets.put(b, s);
                    }
                    byte[] body = readFrom(s, id, entry);
                    // CRC32C: ledger id, entry id, LAC, length (8 bytes each), 4-byte digest, payload.
                    assertNotNull(body, "ledger " + id + " entry " + entry + " is not on " + b);
                    assertEquals(36 + payload.length, body.length, "entry " + entry + " on " + b);
                    assertEquals(id, java.nio.ByteBuffer.wrap(body, 0, 8).getLong());
                    assertEquals(entry, java.nio.ByteBuffer.wrap(body, 8, 8).getLong());
                    assertArrayEquals(payload, java.util.Arrays.copyOfRange(body, 36, body.length),
                            "entry " + entry + " on " + b);
                }
            }
        } finally {
            for (Socket s : sockets.values()) {
                s.close();
            }
        }
        try (LedgerHandle lh = bk.openLedgerNoRecovery(id, DigestType.CRC32C, FolioCluster.PASSWORD)) {
            Enumeration<LedgerEntry> all = lh.readEntries(0, n - 1);
            int i = 0;
            while (all.hasMoreElements()) {
                LedgerEntry le = all.nextElement();
                assertArrayEquals(FolioCluster.payload(id, i), le.getEntry(), "Java client, entry " + i);
                i++;
            }
            assertEquals(n, i);
        }
        List<byte[]> folio = FolioCli.readLedger(id);
        assertEquals(n, folio.size());
        for (int i = 0; i < n; i++) {
            assertArrayEquals(FolioCluster.payload(id, i), folio.get(i), "folio ledger read, entry " + i);
        }
    }

    static long txn = 1;

    /** One v3 READ_ENTRY on {@code s}: the body, or null if the bookie has no such entry. */
    static byte[] readFrom(Socket s, long ledger, long entry) throws IOException {
        Request r = new Request();
        r.setHeader().setVersion(ProtocolVersion.VERSION_THREE).setOperation(OperationType.READ_ENTRY)
                .setTxnId(txn++);
        r.setReadRequest().setLedgerId(ledger).setEntryId(entry);
        // One write per frame, no Nagle: thousands of reads back to back.
        byte[] body = r.toByteArray();
        java.io.ByteArrayOutputStream frame = new java.io.ByteArrayOutputStream(body.length + 4);
        new java.io.DataOutputStream(frame).writeInt(body.length);
        frame.write(body);
        s.getOutputStream().write(frame.toByteArray());
        s.getOutputStream().flush();
        java.io.DataInputStream in = new java.io.DataInputStream(s.getInputStream());
        byte[] answer = new byte[in.readInt()];
        in.readFully(answer);
        Response resp = new Response();
        resp.parseFrom(answer);
        StatusCode st = resp.getReadResponse().getStatus();
        if (st == StatusCode.ENOENTRY || st == StatusCode.ENOLEDGER) {
            return null;
        }
        assertEquals(StatusCode.EOK, st, "read of " + ledger + ":" + entry);
        return resp.getReadResponse().getBody();
    }

    // ---------------------------------------------------------------- logs

    static final Pattern ANSI = Pattern.compile("\u001b\\[[0-9;]*m");
    static final Pattern FOLIO_DONE = Pattern.compile("ledger re-replicated.*\\bledger=(\\d+)");
    static final Pattern JAVA_DONE = Pattern.compile("Ledger replicated successfully.*?ledgerId\\D{0,4}(\\d+)");

    /** The ledgers BookKeeper's worker logged as replicated ("Ledger replicated successfully"). */
    static Set<Long> repairedBy(JavaAutoRecovery a) throws IOException {
        return matches(a.logLines(), JAVA_DONE);
    }

    /** The ledgers Folio's worker logged as re-replicated. */
    static Set<Long> repairedBy(FolioAutoRecovery a) throws IOException {
        return matches(a.logLines(), FOLIO_DONE);
    }

    static Set<Long> matches(List<String> lines, Pattern p) {
        Set<Long> out = new HashSet<>();
        for (String l : lines) {
            Matcher m = p.matcher(ANSI.matcher(l).replaceAll(""));
            if (m.find()) {
                out.add(Long.parseLong(m.group(1)));
            }
        }
        return out;
    }

    static int count(List<String> lines, String needle) {
        int n = 0;
        for (String l : lines) {
            if (ANSI.matcher(l).replaceAll("").contains(needle)) {
                n++;
            }
        }
        return n;
    }

    static void waitUntil(String what, int seconds, Callable<Boolean> done) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
        Exception last = null;
        while (true) {
            try {
                if (done.call()) {
                    return;
                }
            } catch (Exception e) {
                last = e;
            }
            if (System.nanoTime() > deadline) {
                AssertionError err = new AssertionError("not within " + seconds + " s: " + what + logs());
                if (last != null) {
                    err.addSuppressed(last);
                }
                throw err;
            }
            Thread.sleep(200);
        }
    }

    /** The tails of the autorecovery logs, for a failure message. */
    static String logs() {
        StringBuilder sb = new StringBuilder();
        for (JavaAutoRecovery a : JAVA_AR) {
            sb.append("\n--- ").append(a.log).append('\n').append(a.tail());
        }
        for (FolioAutoRecovery a : FOLIO_AR) {
            try {
                List<String> l = a.logLines();
                sb.append("\n--- ").append(a.log).append('\n')
                        .append(String.join("\n", l.subList(Math.max(0, l.size() - 40), l.size())));
            } catch (IOException e) {
                sb.append(e);
            }
        }
        return sb.toString();
    }
}
