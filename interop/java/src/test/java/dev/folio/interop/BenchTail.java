package dev.folio.interop;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicLongArray;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.LockSupport;
import org.apache.bookkeeper.client.BKException;
import org.apache.bookkeeper.client.BookKeeper;
import org.apache.bookkeeper.client.BookKeeper.DigestType;
import org.apache.bookkeeper.client.LedgerHandle;
import org.apache.bookkeeper.client.api.LastConfirmedAndEntry;
import org.apache.bookkeeper.client.api.LedgerEntries;
import org.apache.bookkeeper.client.api.LedgerEntry;
import org.apache.bookkeeper.conf.ClientConfiguration;

/**
 * The Java client's tailing-read benchmark for scripts/bench-vs-bookkeeper --tail, doing what
 * {@code folio bench tail --json} does: one writer appends {@code --entries} entries to a new
 * ledger with {@code asyncAddEntry}, a semaphore keeping {@code --in-flight} appends outstanding;
 * {@code --readers} readers, each with its own client, open the ledger without recovery before
 * the first append and follow it with the v3 long poll, {@code readLastAddConfirmedAndEntryAsync}
 * (READ with previousLAC and a timeout: the bookie holds it until its LAC passes the one asked
 * about, then answers with the next entry), then read whatever else the LAC covers with
 * {@code readUnconfirmedAsync} (256 entries at most per request), until they have every measured
 * entry. The bookies learn an entry's LAC from a later add, so the writer keeps appending
 * (unmeasured, at most as many entries again) until the readers have the measured ones, and
 * closes the ledger after. Latency per entry: from the add callback to a reader holding the
 * entry (delivery, {@code latency_ms}) and from the {@code asyncAddEntry} call
 * ({@code e2e_latency_ms}); one process, one clock. A warm-up run on its own ledger (a tenth of
 * the entries, not measured) lets the JIT compile the client first.
 *
 * <pre>java -cp CLASSPATH dev.folio.interop.BenchTail --metadata zk+null://HOST:PORT/ROOT
 *     [-e 3] [-w 3] [-a 2] [--entry-size 1024] [--entries 10000] [--in-flight 16]
 *     [--readers 1] [--poll-ms 1000] [--warmup 1] [--parallel false] [--rate 0]</pre>
 * {@code --parallel true} long-polls every bookie of the write set at once instead of one.
 * {@code --rate R} paces the writer at R adds per second (the n-th add not before n / R seconds
 * after the first; the window still bounds it), as {@code folio bench tail --rate} does, to
 * compare delivery latency at the same load.
 */
public final class BenchTail {
    private BenchTail() {}

    /** Most entries a reader asks for in one range read, as {@code folio bench tail}. */
    static final int READ_CHUNK = 256;

    static final byte[] PASSWORD = "folio-bench".getBytes();

    public static void main(String[] args) throws Exception {
        String uri = null;
        int e = 3;
        int qw = 3;
        int qa = 2;
        int size = 1024;
        int entries = 10_000;
        int inFlight = 16;
        int readers = 1;
        long pollMs = 1000;
        int warmup = 1;
        boolean parallel = false;
        double rate = 0;
        for (int i = 0; i < args.length; i++) {
            String v = i + 1 < args.length ? args[i + 1] : null;
            switch (args[i]) {
                case "--metadata" -> uri = v;
                case "-e" -> e = Integer.parseInt(v);
                case "-w" -> qw = Integer.parseInt(v);
                case "-a" -> qa = Integer.parseInt(v);
                case "--entry-size" -> size = Integer.parseInt(v);
                case "--entries" -> entries = Integer.parseInt(v);
                case "--in-flight" -> inFlight = Integer.parseInt(v);
                case "--readers" -> readers = Integer.parseInt(v);
                case "--poll-ms" -> pollMs = Long.parseLong(v);
                case "--warmup" -> warmup = Integer.parseInt(v);
                case "--parallel" -> parallel = Boolean.parseBoolean(v);
                case "--rate" -> rate = Double.parseDouble(v);
                default -> {
                    System.err.println("BenchTail: unknown argument " + args[i]);
                    System.exit(2);
                }
            }
            i++;
        }
        if (uri == null || entries < 1 || inFlight < 1 || readers < 1 || !(rate >= 0) || Double.isInfinite(rate)) {
            System.err.println("BenchTail: --metadata URI is required; --entries, --in-flight and --readers >= 1;"
                    + " --rate a finite number of adds per second (0: unpaced)");
            System.exit(2);
        }
        ClientConfiguration conf = new ClientConfiguration();
        conf.setMetadataServiceUri(uri);
        // The client's default rate limit (5000 adds/s) would cap the writer; the window is the limit.
        conf.setThrottleValue(0);
        byte[] payload = new byte[size];
        new java.util.Random(42).nextBytes(payload);
        List<BookKeeper> clients = new ArrayList<>();
        try (BookKeeper writer = new BookKeeper(conf)) {
            for (int r = 0; r < readers; r++) {
                clients.add(new BookKeeper(conf));
            }
            if (warmup > 0) {
                run(writer, clients, e, qw, qa, payload, Math.max(1, entries / 10), inFlight, pollMs, parallel, rate);
            }
            Run run = run(writer, clients, e, qw, qa, payload, entries, inFlight, pollMs, parallel, rate);
            long[] d = run.delivery;
            long[] x = run.e2e;
            long[] a = run.appends;
            Arrays.sort(d);
            Arrays.sort(x);
            Arrays.sort(a);
            System.out.println(String.format(Locale.ROOT,
                    "{\"bench\":\"java-tail\",\"entries\":%d,\"seconds\":%.3f,\"entries_per_sec\":%.1f,"
                            + "\"mb_per_sec\":%.2f,\"latency_ms\":%s,\"e2e_latency_ms\":%s,\"append_latency_ms\":%s,"
                            + "\"latency_from\":\"ack\",\"entry_size\":%d,\"in_flight\":%d,\"readers\":%d,"
                            + "\"written\":%d,\"delivered\":%d,\"ledger_id\":%d,\"ensemble\":%d,"
                            + "\"write_quorum\":%d,\"ack_quorum\":%d,\"phase_cpu_s\":%.3f,\"rate\":%s,\"parallel\":%b}",
                    entries, run.seconds, entries / run.seconds, (double) entries * size / 1e6 / run.seconds,
                    percentiles(d), percentiles(x), percentiles(a), size, inFlight, readers, run.written,
                    (long) entries * readers, run.ledger, e, qw, qa, run.cpuSeconds,
                    rate > 0 ? String.format(Locale.ROOT, "%.1f", rate) : "null", parallel));
        } finally {
            for (BookKeeper c : clients) {
                c.close();
            }
        }
    }

    static String percentiles(long[] sorted) {
        double mean = sorted.length == 0 ? 0 : Arrays.stream(sorted).average().orElse(0) / 1e6;
        return String.format(Locale.ROOT, "{\"p50\":%.3f,\"p99\":%.3f,\"p999\":%.3f,\"max\":%.3f,\"mean\":%.3f}",
                BenchWrite.q(sorted, 0.50), BenchWrite.q(sorted, 0.99), BenchWrite.q(sorted, 0.999),
                sorted.length == 0 ? 0 : sorted[sorted.length - 1] / 1e6, mean);
    }

    /** Latencies in nanoseconds of the measured entries (delivery and end to end: one per reader and entry). */
    record Run(long[] delivery, long[] e2e, long[] appends, double seconds, long written, long ledger,
            double cpuSeconds) {}

    static Run run(BookKeeper writerClient, List<BookKeeper> readerClients, int e, int qw, int qa, byte[] payload,
            int entries, int inFlight, long pollMs, boolean parallel, double rate) throws Exception {
        LedgerHandle w = writerClient.createLedger(e, qw, qa, DigestType.CRC32C, PASSWORD);
        // Each entry's add call and callback, by entry id; the cool-down writes at most `entries` more.
        int cap = 2 * entries;
        AtomicLongArray sent = new AtomicLongArray(cap);
        AtomicLongArray acked = new AtomicLongArray(cap);
        AtomicLong stopped = new AtomicLong();
        AtomicReference<String> failure = new AtomicReference<>();
        List<LedgerHandle> handles = new ArrayList<>();
        for (BookKeeper c : readerClients) {
            handles.add(c.openLedgerNoRecovery(w.getId(), DigestType.CRC32C, PASSWORD));
        }
        long cpu0 = BenchWrite.processCpuNanos();
        long start = System.nanoTime();
        List<CompletableFuture<long[]>> tails = new ArrayList<>();
        for (LedgerHandle r : handles) {
            CompletableFuture<long[]> f = new CompletableFuture<>();
            Thread t = new Thread(() -> {
                try {
                    f.complete(tail(r, entries, pollMs, payload.length, parallel));
                } catch (Throwable x) {
                    f.completeExceptionally(x);
                } finally {
                    stopped.incrementAndGet();
                }
            }, "tail-" + tails.size());
            t.setDaemon(true);
            t.start();
            tails.add(f);
        }
        Semaphore window = new Semaphore(inFlight);
        int n = 0;
        // Until `entries` are written, then (the cool-down) until every reader has stopped: later
        // adds carry the LAC that makes the measured entries visible to the readers.
        long first = System.nanoTime();
        while (failure.get() == null && n < cap && (n < entries || stopped.get() < readerClients.size())) {
            window.acquire();
            if (rate > 0) {
                long due = first + (long) (n * 1e9 / rate);
                for (long now = System.nanoTime(); now < due; now = System.nanoTime()) {
                    LockSupport.parkNanos(due - now);
                }
            }
            final int id = n;
            sent.set(id, System.nanoTime());
            w.asyncAddEntry(payload, (rc, h, entryId, ctx) -> {
                acked.set(id, System.nanoTime());
                if (rc != BKException.Code.OK) {
                    failure.compareAndSet(null, "add " + id + ": " + BKException.getMessage(rc));
                } else if (entryId != id) {
                    failure.compareAndSet(null, "add " + id + " acknowledged as entry " + entryId);
                }
                window.release();
            }, null);
            n++;
        }
        if (!window.tryAcquire(inFlight, 300, TimeUnit.SECONDS)) {
            throw new IllegalStateException("appends did not complete within 300 s");
        }
        if (failure.get() != null) {
            throw new IllegalStateException("append failed: " + failure.get());
        }
        // Ends the readers' tails if the cool-down ran out before they had every entry.
        w.close();
        long[] delivery = new long[entries * handles.size()];
        long[] e2e = new long[entries * handles.size()];
        long last = start;
        int k = 0;
        for (CompletableFuture<long[]> f : tails) {
            long[] at = f.get(300, TimeUnit.SECONDS);
            for (int i = 0; i < entries; i++) {
                // A delivery before the add callback ran counts as 0.
                delivery[k] = Math.max(0, at[i] - acked.get(i));
                e2e[k] = at[i] - sent.get(i);
                k++;
            }
            last = Math.max(last, at[entries - 1]);
        }
        long[] appends = new long[entries];
        for (int i = 0; i < entries; i++) {
            appends[i] = acked.get(i) - sent.get(i);
        }
        double cpu = (BenchWrite.processCpuNanos() - cpu0) / 1e9;
        for (LedgerHandle r : handles) {
            r.close();
        }
        return new Run(delivery, e2e, appends, (last - start) / 1e9, n, w.getId(), cpu);
    }

    /**
     * One tailing reader: returns when it held each of the first {@code entries} entries
     * (System.nanoTime), each checked to be the next in order and {@code size} bytes long.
     */
    static long[] tail(LedgerHandle r, int entries, long pollMs, int size, boolean parallel) throws Exception {
        long[] at = new long[entries];
        int next = 0;
        while (next < entries) {
            long lac;
            LastConfirmedAndEntry lce;
            try {
                lce = r.readLastAddConfirmedAndEntryAsync(next, pollMs, parallel)
                        .get(pollMs + 60_000, TimeUnit.MILLISECONDS);
            } catch (ExecutionException x) {
                // Until the first add reaches them BookKeeper's bookies know no such ledger and
                // answer the long poll at once (Folio's hold it until the first adds, or answer
                // so at its end); look again shortly.
                if (next == 0 && (x.getCause() instanceof BKException.BKNoSuchLedgerExistsException
                        || x.getCause() instanceof BKException.BKNoSuchEntryException)) {
                    Thread.sleep(1);
                    continue;
                }
                throw x;
            }
            try (lce) {
                lac = lce.getLastAddConfirmed();
                if (lce.hasEntry()) {
                    check(lce.getEntry(), next, size);
                    at[next++] = System.nanoTime();
                }
            }
            if (lac < next && r.isClosed()) {
                lac = r.getLastAddConfirmed();
                if (lac < next) {
                    throw new IllegalStateException("ledger " + r.getId() + " closed at " + lac
                            + " before entry " + next);
                }
            }
            while (next <= lac && next < entries) {
                long end = Math.min(lac, next + READ_CHUNK - 1);
                try (LedgerEntries got = r.readUnconfirmedAsync(next, end).get(60, TimeUnit.SECONDS)) {
                    long now = System.nanoTime();
                    for (LedgerEntry x : got) {
                        check(x, next, size);
                        if (next < entries) {
                            at[next] = now;
                        }
                        next++;
                    }
                }
            }
        }
        return at;
    }

    static void check(LedgerEntry x, long want, int size) {
        if (x.getEntryId() != want) {
            throw new IllegalStateException("expected entry " + want + ", got " + x.getEntryId());
        }
        // getLength() is the ledger's length up to this entry, not the entry's.
        int got = x.getEntryBuffer().readableBytes();
        if (got != size) {
            throw new IllegalStateException("entry " + want + ": " + got + " bytes");
        }
    }
}
