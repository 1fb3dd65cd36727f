package dev.folio.interop;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.apache.bookkeeper.bookie.Cookie;
import org.apache.bookkeeper.client.BookKeeper;
import org.apache.bookkeeper.client.BookKeeper.DigestType;
import org.apache.bookkeeper.client.BookKeeperAdmin;
import org.apache.bookkeeper.client.LedgerHandle;
import org.apache.bookkeeper.conf.ClientConfiguration;
import org.apache.bookkeeper.conf.ServerConfiguration;
import org.apache.bookkeeper.meta.MetadataDrivers;
import org.apache.bookkeeper.net.BookieId;
import org.junit.jupiter.api.Test;

/**
 * The other way round from MixedClusterTest: BookKeeper initialises a new cluster
 * ({@code BookKeeperAdmin.initNewCluster}, its layout and instance id) under a fresh root on the
 * same ZooKeeper, three `folio bookie` processes join it, and the Java client and
 * `folio ledger read` write and read a ledger there.
 */
class BookKeeperInitialisedClusterTest {

    static final class FolioBookie implements AutoCloseable {
        final Process process;
        final String id;

        FolioBookie(String metadataUri, Path dir) throws Exception {
            Files.createDirectories(dir);
            Path conf = dir.resolve("bookie.toml");
            // The host's disk may be nearly full; that must never fail a test.
            Files.writeString(conf, "listen_address = \"127.0.0.1\"\n"
                    + "disk_usage_threshold = 0.999\ndisk_usage_lwm_threshold = 0.998\n");
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
                throw new AssertionError("folio bookie did not start on " + metadataUri + ": "
                        + Files.readString(dir.resolve("bookie.err")));
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

    @Test
    void folioBookiesJoinBookKeeperInitialisedCluster() throws Exception {
        String root = "/bk-initialised-" + System.nanoTime();
        String javaUri = "zk+null://" + FolioCluster.zk() + root;
        String folioUri = "zk://" + FolioCluster.zk() + root;
        ServerConfiguration server = new ServerConfiguration();
        server.setMetadataServiceUri("zk+hierarchical://" + FolioCluster.zk() + root);
        server.setZkTimeout(30_000);
        assertTrue(BookKeeperAdmin.initNewCluster(server), "BookKeeper could not initialise " + root);

        List<FolioBookie> bookies = new ArrayList<>();
        try {
            for (int i = 1; i <= 3; i++) {
                bookies.add(new FolioBookie(folioUri, FolioCluster.workDir().resolve("bk-initialised" + i)));
            }
            Set<String> ids = new HashSet<>();
            bookies.forEach(b -> ids.add(b.id));
            // The cookies Folio wrote carry BookKeeper's instance id.
            MetadataDrivers.runFunctionWithRegistrationManager(server, rm -> {
                try {
                    String instanceId = rm.getClusterInstanceId();
                    for (String id : ids) {
                        String cookie = Cookie.readFromRegistrationManager(rm, BookieId.parse(id)).getValue().toString();
                        assertTrue(cookie.contains("instanceId: \"" + instanceId + "\""), cookie);
                    }
                    return null;
                } catch (Exception e) {
                    throw new RuntimeException(e);
                }
            });
            ClientConfiguration conf = FolioCluster.conf(false);
            conf.setMetadataServiceUri(javaUri);
            long seed = System.nanoTime();
            int count = 500;
            long id;
            try (BookKeeper bk = new BookKeeper(conf)) {
                Set<String> available = new HashSet<>();
                new BookKeeperAdmin(bk).getAvailableBookies().forEach(b -> available.add(b.toString()));
                assertEquals(ids, available);
                LedgerHandle lh = bk.createLedger(3, 2, 2, DigestType.CRC32C, FolioCluster.PASSWORD);
                id = lh.getId();
                RoundTripTest.appendAll(lh, seed, count);
                lh.close();
                LedgerHandle r = bk.openLedger(id, DigestType.CRC32C, FolioCluster.PASSWORD);
                RoundTripTest.readAllBack(r, seed, count);
            }
            List<byte[]> read = FolioCli.readLedgerOn(folioUri, id);
            assertEquals(count, read.size());
            for (int i = 0; i < count; i++) {
                assertArrayEquals(FolioCluster.payload(seed, i), read.get(i), "payload of entry " + i);
            }
        } finally {
            for (FolioBookie b : bookies) {
                b.close();
            }
        }
    }
}
