package dev.folio.interop;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.bookkeeper.client.BKException;
import org.apache.bookkeeper.client.BookKeeper;
import org.apache.bookkeeper.client.BookKeeper.DigestType;
import org.apache.bookkeeper.client.LedgerHandle;
import org.apache.bookkeeper.client.api.LastConfirmedAndEntry;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Fencing and tailing through Folio bookies: a recovery open fences the Java writer, which must
 * get BookKeeper's fenced error; a reader tails a live writer with long-poll LAC reads.
 */
class FencingAndTailingTest {

    @ParameterizedTest(name = "v2={0}")
    @ValueSource(booleans = {false, true})
    void recoveryOpenFencesTheWriter(boolean v2) throws Exception {
        long seed = System.nanoTime();
        try (BookKeeper writer = new BookKeeper(FolioCluster.conf(v2));
                BookKeeper reader = new BookKeeper(FolioCluster.conf(v2))) {
            LedgerHandle w = writer.createLedger(3, 2, 2, DigestType.CRC32C, FolioCluster.PASSWORD);
            for (int i = 0; i < 10; i++) {
                assertEquals(i, w.addEntry(FolioCluster.payload(seed, i)));
            }
            LedgerHandle r = reader.openLedger(w.getId(), DigestType.CRC32C, FolioCluster.PASSWORD);
            assertEquals(9, r.getLastAddConfirmed());
            assertThrows(BKException.BKLedgerFencedException.class,
                    () -> w.addEntry(FolioCluster.payload(seed, 10)));
            // The fenced add did not extend the ledger.
            assertEquals(9, r.getLastAddConfirmed());
            assertArrayEquals(FolioCluster.payload(seed, 9), r.readEntries(9, 9).nextElement().getEntry());
        }
    }

    /**
     * The writer appends one entry at a time with pauses; the reader, opened without recovery,
     * waits for each next entry with readLastAddConfirmedAndEntry (the v3 long-poll read). An
     * entry becomes visible once the entry after it carries the LAC past it, so the reader tails
     * all but the last entry.
     */
    @ParameterizedTest(name = "digest={0}")
    @ValueSource(strings = {"CRC32", "MAC"})
    void readerTailsWriterWithLongPoll(String digestName) throws Exception {
        DigestType digest = DigestType.valueOf(digestName);
        long seed = System.nanoTime();
        int count = 60;
        try (BookKeeper writer = new BookKeeper(FolioCluster.conf(false));
                BookKeeper reader = new BookKeeper(FolioCluster.conf(false))) {
            LedgerHandle w = writer.createLedger(3, 2, 2, digest, FolioCluster.PASSWORD);
            w.addEntry(FolioCluster.payload(seed, 0));
            LedgerHandle r = reader.openLedgerNoRecovery(w.getId(), digest, FolioCluster.PASSWORD);
            CompletableFuture<Void> writing = CompletableFuture.runAsync(() -> {
                try {
                    for (int i = 1; i < count; i++) {
                        Thread.sleep(20);
                        w.addEntry(FolioCluster.payload(seed, i));
                    }
                } catch (Exception e) {
                    throw new RuntimeException(e);
                }
            });
            long next = 0;
            int polls = 0;
            int emptyPolls = 0;
            while (next < count - 1) {
                assertTrue(polls++ < 100_000, "tailing made no progress");
                LastConfirmedAndEntry lce;
                try {
                    lce = r.readLastAddConfirmedAndEntryAsync(next, 10_000, false).get(120, TimeUnit.SECONDS);
                } catch (ExecutionException e) {
                    throw new AssertionError("long-poll read of entry " + next + " failed", e.getCause());
                }
                try (lce) {
                    assertTrue(lce.getLastAddConfirmed() <= count - 1);
                    if (lce.hasEntry()) {
                        assertEquals(next, lce.getEntry().getEntryId());
                        assertArrayEquals(FolioCluster.payload(seed, (int) next), lce.getEntry().getEntryBytes(),
                                "payload of entry " + next);
                        next++;
                    } else {
                        emptyPolls++;
                    }
                }
            }
            writing.get(300, TimeUnit.SECONDS);
            // A long poll is held by the bookies until the LAC passes the previous one (or 10 s
            // pass): answered at once instead, the reader would come back empty many times for
            // each entry (the writer pauses 20 ms between entries).
            assertTrue(emptyPolls <= count, emptyPolls + " long polls came back without an entry");
            assertEquals(count - 1, next);
            w.close();
        }
    }
}
