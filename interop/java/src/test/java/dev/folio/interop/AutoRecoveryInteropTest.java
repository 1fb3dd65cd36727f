package dev.folio.interop;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import org.apache.bookkeeper.client.BookKeeper;
import org.apache.bookkeeper.client.BookKeeper.DigestType;
import org.apache.bookkeeper.client.BookKeeperAdmin;
import org.apache.bookkeeper.client.LedgerHandle;
import org.apache.bookkeeper.conf.ServerConfiguration;
import org.apache.bookkeeper.meta.LedgerUnderreplicationManager;
import org.apache.bookkeeper.meta.MetadataDrivers;
import org.apache.bookkeeper.meta.UnderreplicatedLedger;
import org.apache.bookkeeper.net.BookieId;
import org.junit.jupiter.api.Test;

/**
 * Folio's autorecovery in BookKeeper's ZooKeeper layout, seen from BookKeeper's own admin API:
 * {@code BookKeeperAdmin} finds Folio's Auditor, the lost-bookie delay it sets is the one Folio
 * reads, its {@code triggerAudit} is accepted; a mark written by BookKeeper's
 * {@code LedgerUnderreplicationManager} is listed by Folio's shell with its missing replica, the
 * switch BookKeeper turns off is off for Folio and the one Folio turns on is on for BookKeeper,
 * and Folio's ReplicationWorker takes BookKeeper's mark from the shared queue, checks the
 * ledger and clears it.
 */
class AutoRecoveryInteropTest {

    static final String AUDITOR_ID = "127.0.0.1:49181";

    static String shell(String... args) throws Exception {
        String[] all = new String[args.length + 1];
        all[0] = "shell";
        System.arraycopy(args, 0, all, 1, args.length);
        try (FolioCli cli = FolioCli.start(all)) {
            StringBuilder out = new StringBuilder();
            String l;
            while ((l = cli.nextLine()) != null) {
                out.append(l).append('\n');
            }
            int rc = cli.waitFor();
            if (rc != 0) {
                throw new AssertionError("folio shell " + String.join(" ", args) + " exited " + rc);
            }
            return out.toString();
        }
    }

    static <T> T withUnderreplication(java.util.function.Function<LedgerUnderreplicationManager, T> f)
            throws Exception {
        ServerConfiguration conf = new ServerConfiguration();
        conf.setMetadataServiceUri(FolioCluster.javaMetadataUri());
        conf.setZkTimeout(30_000);
        return MetadataDrivers.runFunctionWithLedgerManagerFactory(conf, factory -> {
            try (LedgerUnderreplicationManager urm = factory.newLedgerUnderreplicationManager()) {
                return f.apply(urm);
            } catch (Exception e) {
                throw new RuntimeException(e);
            }
        });
    }

    static void waitUntil(String what, java.util.concurrent.Callable<Boolean> done) throws Exception {
        long deadline = System.nanoTime() + 300_000_000_000L;
        while (!done.call()) {
            if (System.nanoTime() > deadline) {
                throw new AssertionError("not within 300 s: " + what);
            }
            Thread.sleep(200);
        }
    }

    @Test
    void bookkeeperAdminAndFolioAutorecoveryShareOneLayout() throws Exception {
        try (FolioCli ar = FolioCli.start("autorecovery", "--id", AUDITOR_ID,
                "--open-ledger-grace-period-ms", "1000");
             BookKeeperAdmin admin = new BookKeeperAdmin(FolioCluster.conf(false));
             BookKeeper bk = new BookKeeper(FolioCluster.conf(false))) {
            String l;
            while ((l = ar.nextLine()) != null && !l.equals("ready")) {
                // "autorecovery <id> running on <uri>"
            }
            assertEquals("ready", l);

            // BookKeeper's admin finds Folio's Auditor (its vote, in BookKeeper's format).
            waitUntil("BookKeeperAdmin sees Folio's Auditor", () -> {
                BookieId a = admin.getCurrentAuditor();
                return a != null && a.toString().equals(AUDITOR_ID);
            });

            // The delay BookKeeper sets is Folio's; triggerAudit is accepted (an Auditor is up).
            admin.setLostBookieRecoveryDelay(17);
            assertEquals(17, admin.getLostBookieRecoveryDelay());
            assertEquals("LostBookieRecoveryDelay value: 17\n", shell("lostbookierecoverydelay", "-get"));
            admin.triggerAudit();
            admin.setLostBookieRecoveryDelay(0);

            // A healthy ledger, written by the Java client to the Folio bookies.
            LedgerHandle lh = bk.createLedger(3, 3, 2, DigestType.CRC32C, FolioCluster.PASSWORD);
            for (int i = 0; i < 20; i++) {
                lh.addEntry(FolioCluster.payload(lh.getId(), i));
            }
            lh.close();
            long id = lh.getId();
            String replica = FolioCluster.bookies().get(0);

            // BookKeeper turns re-replication off and marks the ledger: Folio sees both.
            withUnderreplication(urm -> {
                try {
                    urm.disableLedgerReplication();
                    urm.markLedgerUnderreplicated(id, replica);
                } catch (Exception e) {
                    throw new RuntimeException(e);
                }
                return null;
            });
            assertEquals("AutoRecovery is disabled\n", shell("autorecovery", "-status"));
            String listed = shell("listunderreplicated", "-pmr");
            assertTrue(listed.contains(id + "\n\tMissingReplica : [" + replica + "]"), listed);

            // Folio turns it on again: BookKeeper sees it on, and Folio's worker takes the mark,
            // finds every copy in place and clears it.
            shell("autorecovery", "-enable");
            Boolean enabled = withUnderreplication(urm -> {
                try {
                    return urm.isLedgerReplicationEnabled();
                } catch (Exception e) {
                    throw new RuntimeException(e);
                }
            });
            assertTrue(enabled, "BookKeeper sees re-replication enabled");
            waitUntil("Folio's worker clears BookKeeper's mark of ledger " + id,
                    () -> AutoRecoveryInteropTest.<Boolean>withUnderreplication(urm -> {
                        try {
                            UnderreplicatedLedger u = urm.getLedgerUnreplicationInfo(id);
                            return u == null;
                        } catch (Exception e) {
                            throw new RuntimeException(e);
                        }
                    }));
            // The ledger is as it was: every entry reads back through Folio.
            List<byte[]> entries = FolioCli.readLedger(id);
            assertEquals(20, entries.size());
            for (int i = 0; i < 20; i++) {
                assertNotNull(entries.get(i));
                assertTrue(java.util.Arrays.equals(FolioCluster.payload(id, i), entries.get(i)), "entry " + i);
            }
            assertFalse(shell("listunderreplicated").contains(id + "\n"));
            ar.process.destroy();
            ar.waitFor();
        }
    }
}
