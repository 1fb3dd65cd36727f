package dev.folio.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.apache.bookkeeper.bookie.Cookie;
import org.apache.bookkeeper.client.BookKeeper;
import org.apache.bookkeeper.client.BookKeeper.DigestType;
import org.apache.bookkeeper.client.BookKeeperAdmin;
import org.apache.bookkeeper.client.BookieInfoReader.BookieInfo;
import org.apache.bookkeeper.client.LedgerHandle;
import org.apache.bookkeeper.client.api.LedgerMetadata;
import org.apache.bookkeeper.conf.ServerConfiguration;
import org.apache.bookkeeper.discover.BookieServiceInfo;
import org.apache.bookkeeper.meta.MetadataDrivers;
import org.apache.bookkeeper.net.BookieId;
import org.apache.bookkeeper.versioning.Versioned;
import org.junit.jupiter.api.Test;

/**
 * BookKeeper's admin views of a Folio cluster: the bookie registrations (and the service info in
 * them), the cookies, disk info over the wire, and ledger listing and metadata.
 */
class AdminTest {

    static Set<String> ids(java.util.Collection<BookieId> c) {
        return c.stream().map(BookieId::toString).collect(Collectors.toSet());
    }

    @Test
    void adminListsFolioBookies() throws Exception {
        Set<String> expected = new HashSet<>(FolioCluster.bookies());
        try (BookKeeperAdmin admin = new BookKeeperAdmin(FolioCluster.conf(false))) {
            assertEquals(expected, ids(admin.getAvailableBookies()));
            assertEquals(expected, ids(admin.getAllBookies()));
            assertTrue(admin.getReadOnlyBookies().isEmpty());
        }
    }

    @Test
    void registrationCarriesServiceInfo() throws Exception {
        try (BookKeeper bk = new BookKeeper(FolioCluster.conf(false))) {
            for (String id : FolioCluster.bookies()) {
                Versioned<BookieServiceInfo> info = bk.getMetadataClientDriver().getRegistrationClient()
                        .getBookieServiceInfo(BookieId.parse(id)).get();
                BookieServiceInfo.Endpoint rpc = info.getValue().getEndpoints().stream()
                        .filter(e -> "bookie-rpc".equals(e.getProtocol())).findFirst()
                        .orElseThrow(() -> new AssertionError("no bookie-rpc endpoint for " + id));
                assertEquals(id, rpc.getHost() + ":" + rpc.getPort());
            }
        }
    }

    @Test
    void bookieInfoOverTheWire() throws Exception {
        try (BookKeeper bk = new BookKeeper(FolioCluster.conf(false))) {
            Map<BookieId, BookieInfo> infos = bk.getBookieInfo();
            assertEquals(new HashSet<>(FolioCluster.bookies()), ids(infos.keySet()));
            for (Map.Entry<BookieId, BookieInfo> e : infos.entrySet()) {
                assertTrue(e.getValue().getTotalDiskSpace() > 0, "total disk space of " + e.getKey());
                assertTrue(e.getValue().getFreeDiskSpace() > 0, "free disk space of " + e.getKey());
                assertTrue(e.getValue().getFreeDiskSpace() <= e.getValue().getTotalDiskSpace());
            }
        }
    }

    /** BookKeeper parses Folio's cookies, in ZooKeeper and in the bookies' directories alike. */
    @Test
    void cookiesParseInBookKeeper() throws Exception {
        ServerConfiguration conf = new ServerConfiguration();
        conf.setMetadataServiceUri(FolioCluster.javaMetadataUri());
        conf.setZkTimeout(30_000);
        List<String> bookies = FolioCluster.bookies();
        MetadataDrivers.runFunctionWithRegistrationManager(conf, rm -> {
            try {
                String instanceId = rm.getClusterInstanceId();
                assertNotNull(instanceId);
                for (int i = 0; i < bookies.size(); i++) {
                    String id = bookies.get(i);
                    Cookie cookie = Cookie.readFromRegistrationManager(rm, BookieId.parse(id)).getValue();
                    String text = cookie.toString();
                    assertTrue(text.contains("bookieHost: \"" + id + "\""), text);
                    assertTrue(text.contains("instanceId: \"" + instanceId + "\""), text);
                    // Every directory cookie of bookie i+1 (interop/run's bookie<n> dirs) matches it.
                    Path dir = FolioCluster.workDir().resolve("bookie" + (i + 1));
                    List<Path> versions;
                    try (Stream<Path> s = Files.walk(dir)) {
                        versions = s.filter(p -> p.getFileName().toString().equals("VERSION")
                                && p.getParent().getFileName().toString().equals("current")).toList();
                    }
                    assertTrue(!versions.isEmpty(), "no current/VERSION cookie under " + dir);
                    for (Path v : versions) {
                        Cookie onDisk = Cookie.readFromDirectory(new File(v.getParent().toString()));
                        cookie.verify(onDisk);
                    }
                }
                return null;
            } catch (Exception e) {
                throw new RuntimeException(e);
            }
        });
    }

    @Test
    void adminListsLedgersAndReadsMetadata() throws Exception {
        try (BookKeeper bk = new BookKeeper(FolioCluster.conf(false));
                BookKeeperAdmin admin = new BookKeeperAdmin(bk)) {
            LedgerHandle lh = bk.createLedger(3, 3, 2, DigestType.CRC32, FolioCluster.PASSWORD);
            lh.addEntry("x".getBytes());
            lh.close();
            Set<Long> listed = new HashSet<>();
            admin.listLedgers().forEach(listed::add);
            assertTrue(listed.contains(lh.getId()), "ledger " + lh.getId() + " not listed");
            LedgerMetadata md = bk.getLedgerManager().readLedgerMetadata(lh.getId()).get().getValue();
            assertTrue(md.isClosed());
            assertEquals(0, md.getLastEntryId());
            assertEquals(3, md.getEnsembleSize());
        }
    }
}
