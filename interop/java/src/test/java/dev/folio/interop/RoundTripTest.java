package dev.folio.interop;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Enumeration;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.stream.Stream;
import org.apache.bookkeeper.client.BKException;
import org.apache.bookkeeper.client.BookKeeper;
import org.apache.bookkeeper.client.BookKeeper.DigestType;
import org.apache.bookkeeper.client.LedgerEntry;
import org.apache.bookkeeper.client.LedgerHandle;
import org.apache.bookkeeper.client.api.LedgerEntries;
import org.apache.bookkeeper.client.api.LedgerMetadata;
import org.apache.bookkeeper.client.api.ReadHandle;
import org.apache.bookkeeper.client.api.WriteHandle;
import org.apache.bookkeeper.net.BookieId;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The Java client writes ledgers to Folio bookies and reads them back after a recovery open:
 * both wire protocols (v3, the default, and v2, as Pulsar sets it), the three digests, and two
 * quorum shapes; `folio ledger read` (Folio's client) then reads the same ledger byte for byte.
 */
class RoundTripTest {
    /** The count: 10,000 entries of mixed sizes per ledger (about 34 MB, FolioCluster.entrySize). */
    static final int ENTRIES = 10_000;

    /** Every combination: both wire protocols, the three digests, E3/Qw2/Qa2 and E3/Qw3/Qa2. */
    static Stream<Arguments> shapes() {
        List<Arguments> all = new java.util.ArrayList<>();
        for (int qw : new int[] {2, 3}) {
            for (DigestType digest : new DigestType[] {DigestType.CRC32, DigestType.CRC32C, DigestType.MAC}) {
                for (boolean v2 : new boolean[] {false, true}) {
                    all.add(Arguments.of(v2, digest, 3, qw, 2));
                }
            }
        }
        return all.stream();
    }

    /** Appends {@code count} entries pipelined (up to 64 outstanding) and checks each entry id. */
    static void appendAll(LedgerHandle lh, long seed, int count) throws Exception {
        Semaphore window = new Semaphore(64);
        AtomicInteger failures = new AtomicInteger();
        StringBuffer firstFailure = new StringBuffer();
        for (int i = 0; i < count; i++) {
            window.acquire();
            final long expected = i;
            lh.asyncAddEntry(FolioCluster.payload(seed, i), (rc, handle, entryId, ctx) -> {
                if (rc != BKException.Code.OK || entryId != expected) {
                    if (failures.getAndIncrement() == 0) {
                        firstFailure.append("entry " + expected + ": rc " + BKException.getMessage(rc)
                                + ", entry id " + entryId);
                    }
                }
                window.release();
            }, null);
        }
        assertTrue(window.tryAcquire(64, 300, TimeUnit.SECONDS), "adds did not complete");
        assertEquals(0, failures.get(), () -> "adds failed: " + firstFailure);
        assertEquals(count - 1, lh.getLastAddConfirmed());
    }

    /** Reads every entry back (100 at a time) and compares it byte for byte. */
    static void readAllBack(LedgerHandle lh, long seed, int count) throws Exception {
        for (int first = 0; first < count; first += 100) {
            int last = Math.min(count, first + 100) - 1;
            Enumeration<LedgerEntry> entries = lh.readEntries(first, last);
            int expected = first;
            while (entries.hasMoreElements()) {
                LedgerEntry e = entries.nextElement();
                assertEquals(expected, e.getEntryId());
                assertArrayEquals(FolioCluster.payload(seed, expected), e.getEntry(),
                        "payload of entry " + expected);
                expected++;
            }
            assertEquals(last + 1, expected, "entries returned for " + first + ".." + last);
        }
    }

    static void assertEnsembleOnFolio(LedgerMetadata md, int ensemble, int writeQuorum, int ackQuorum) {
        assertEquals(ensemble, md.getEnsembleSize());
        assertEquals(writeQuorum, md.getWriteQuorumSize());
        assertEquals(ackQuorum, md.getAckQuorumSize());
        Set<String> folio = new HashSet<>(FolioCluster.bookies());
        for (List<BookieId> seg : md.getAllEnsembles().values()) {
            for (BookieId b : seg) {
                assertTrue(folio.contains(b.toString()), "ensemble member " + b + " is not a Folio bookie");
            }
        }
    }

    @ParameterizedTest(name = "v2={0} {1} E{2}/Qw{3}/Qa{4}")
    @MethodSource("shapes")
    void writeCloseRecoverRead(boolean v2, DigestType digest, int e, int qw, int qa) throws Exception {
        long seed = System.nanoTime();
        long id;
        try (BookKeeper writer = new BookKeeper(FolioCluster.conf(v2))) {
            LedgerHandle lh = writer.createLedger(e, qw, qa, digest, FolioCluster.PASSWORD);
            id = lh.getId();
            appendAll(lh, seed, ENTRIES);
            lh.close();
        }
        try (BookKeeper reader = new BookKeeper(FolioCluster.conf(v2))) {
            LedgerHandle lh = reader.openLedger(id, digest, FolioCluster.PASSWORD);
            assertTrue(lh.isClosed());
            assertEquals(ENTRIES - 1, lh.getLastAddConfirmed());
            assertEquals(FolioCluster.totalLength(seed, ENTRIES), lh.getLength());
            assertEnsembleOnFolio(lh.getLedgerMetadata(), e, qw, qa);
            readAllBack(lh, seed, ENTRIES);
            lh.close();
        }
        // Folio's client (`folio ledger read`) returns the same bytes.
        List<byte[]> read = FolioCli.readLedger(id);
        assertEquals(ENTRIES, read.size());
        for (int i = 0; i < ENTRIES; i++) {
            assertArrayEquals(FolioCluster.payload(seed, i), read.get(i), "payload of entry " + i);
        }
    }

    /**
     * A writer that never closes: the recovery open fences the Folio bookies, reads past the LAC
     * they hold, writes the tail back and closes the ledger; every acknowledged entry is there.
     */
    @ParameterizedTest(name = "v2={0}")
    @MethodSource("wireProtocols")
    void recoverAnUnclosedLedger(boolean v2) throws Exception {
        long seed = System.nanoTime();
        int count = 300;
        try (BookKeeper writer = new BookKeeper(FolioCluster.conf(v2));
                BookKeeper reader = new BookKeeper(FolioCluster.conf(v2))) {
            LedgerHandle w = writer.createLedger(3, 2, 2, DigestType.CRC32C, FolioCluster.PASSWORD);
            appendAll(w, seed, count);
            LedgerHandle r = reader.openLedger(w.getId(), DigestType.CRC32C, FolioCluster.PASSWORD);
            assertTrue(r.isClosed());
            assertEquals(count - 1, r.getLastAddConfirmed());
            assertEquals(FolioCluster.totalLength(seed, count), r.getLength());
            readAllBack(r, seed, count);
        }
    }

    static Stream<Boolean> wireProtocols() {
        return Stream.of(false, true);
    }

    /** The new API (builders, WriteHandle, ReadHandle), as newer Pulsar code paths use it. */
    @Test
    void newApiRoundTrip() throws Exception {
        long seed = System.nanoTime();
        int count = 200;
        try (org.apache.bookkeeper.client.api.BookKeeper bk =
                org.apache.bookkeeper.client.api.BookKeeper.newBuilder(FolioCluster.conf(false)).build()) {
            long id;
            try (WriteHandle wh = bk.newCreateLedgerOp()
                    .withEnsembleSize(3).withWriteQuorumSize(2).withAckQuorumSize(2)
                    .withDigestType(org.apache.bookkeeper.client.api.DigestType.CRC32C)
                    .withPassword(FolioCluster.PASSWORD)
                    .execute().get(120, TimeUnit.SECONDS)) {
                id = wh.getId();
                CompletableFuture<?>[] adds = new CompletableFuture<?>[count];
                for (int i = 0; i < count; i++) {
                    adds[i] = wh.appendAsync(FolioCluster.payload(seed, i));
                }
                CompletableFuture.allOf(adds).get(300, TimeUnit.SECONDS);
                for (int i = 0; i < count; i++) {
                    assertEquals((long) i, adds[i].get());
                }
            }
            try (ReadHandle rh = bk.newOpenLedgerOp().withLedgerId(id).withRecovery(true)
                    .withPassword(FolioCluster.PASSWORD)
                    .withDigestType(org.apache.bookkeeper.client.api.DigestType.CRC32C)
                    .execute().get(120, TimeUnit.SECONDS)) {
                assertTrue(rh.isClosed());
                assertEquals(count - 1, rh.getLastAddConfirmed());
                try (LedgerEntries entries = rh.read(0, count - 1)) {
                    int i = 0;
                    for (org.apache.bookkeeper.client.api.LedgerEntry e : entries) {
                        assertEquals(i, e.getEntryId());
                        assertArrayEquals(FolioCluster.payload(seed, i), e.getEntryBytes());
                        i++;
                    }
                    assertEquals(count, i);
                }
            }
            bk.newDeleteLedgerOp().withLedgerId(id).execute().get(120, TimeUnit.SECONDS);
        }
    }
}
