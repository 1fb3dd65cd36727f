package dev.folio.interop;

import java.util.Arrays;
import java.util.Enumeration;
import java.util.Locale;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.bookkeeper.client.BKException;
import org.apache.bookkeeper.client.BookKeeper;
import org.apache.bookkeeper.client.BookKeeper.DigestType;
import org.apache.bookkeeper.client.LedgerEntry;
import org.apache.bookkeeper.client.LedgerHandle;
import org.apache.bookkeeper.conf.ClientConfiguration;

/**
 * The Java client's catch-up read benchmark for scripts/bench-vs-bookkeeper --reads: opens an
 * existing closed ledger without recovery and reads it from its first entry to its last with
 * {@code asyncReadEntries} of {@code --batch} consecutive entries, a semaphore keeping
 * {@code --in-flight} read requests outstanding; each request's latency from the call to its
 * callback; every entry's payload length is checked. A warm-up pass over the first 5% of the
 * entries (not measured) lets the JIT compile the client first. Prints the same JSON object
 * as {@code folio bench read --json}.
 *
 * <pre>java -cp CLASSPATH dev.folio.interop.BenchRead --metadata zk+null://HOST:PORT/ROOT
 *     --ledger ID [--password folio-bench] [--in-flight 100] [--batch 1]</pre>
 */
public final class BenchRead {
    private BenchRead() {}

    public static void main(String[] args) throws Exception {
        String uri = null;
        long ledger = -1;
        String password = "folio-bench";
        int inFlight = 100;
        int batch = 1;
        for (int i = 0; i < args.length; i++) {
            String v = i + 1 < args.length ? args[i + 1] : null;
            switch (args[i]) {
                case "--metadata" -> uri = v;
                case "--ledger" -> ledger = Long.parseLong(v);
                case "--password" -> password = v;
                case "--in-flight" -> inFlight = Integer.parseInt(v);
                case "--batch" -> batch = Integer.parseInt(v);
                default -> {
                    System.err.println("BenchRead: unknown argument " + args[i]);
                    System.exit(2);
                }
            }
            i++;
        }
        if (uri == null || ledger < 0) {
            System.err.println("BenchRead: --metadata URI and --ledger ID are required");
            System.exit(2);
        }
        ClientConfiguration conf = new ClientConfiguration();
        conf.setMetadataServiceUri(uri);
        conf.setThrottleValue(0);
        try (BookKeeper bk = new BookKeeper(conf)) {
            LedgerHandle lh = bk.openLedgerNoRecovery(ledger, DigestType.CRC32C, password.getBytes());
            long last = lh.getLastAddConfirmed();
            if (last < 0) {
                throw new IllegalStateException("ledger " + ledger + " is empty");
            }
            Enumeration<LedgerEntry> first = lh.readEntries(0, 0);
            int size = first.nextElement().getEntry().length;
            read(lh, Math.max(0, (last + 1) / 20 - 1), batch, inFlight, size);
            Result r = read(lh, last, batch, inFlight, size);
            long[] l = r.latenciesNanos;
            Arrays.sort(l);
            double mean = l.length == 0 ? 0 : Arrays.stream(l).average().orElse(0) / 1e6;
            long entries = last + 1;
            System.out.println(String.format(Locale.ROOT,
                    "{\"bench\":\"java-read\",\"entries\":%d,\"seconds\":%.3f,\"entries_per_sec\":%.1f,"
                            + "\"mb_per_sec\":%.2f,\"latency_ms\":{\"p50\":%.3f,\"p99\":%.3f,\"p999\":%.3f,"
                            + "\"max\":%.3f,\"mean\":%.3f},\"entry_size\":%d,\"in_flight\":%d,\"batch\":%d,"
                            + "\"ledgers\":1,\"phase_cpu_s\":%.3f}",
                    entries, r.seconds, entries / r.seconds, (double) entries * size / 1e6 / r.seconds,
                    BenchWrite.q(l, 0.50), BenchWrite.q(l, 0.99), BenchWrite.q(l, 0.999),
                    l.length == 0 ? 0 : l[l.length - 1] / 1e6, mean, size, inFlight, batch, r.cpuSeconds));
            lh.close();
        }
    }

    record Result(long[] latenciesNanos, double seconds, double cpuSeconds) {}

    /** Reads entries 0..=last in requests of {@code batch}; every entry must be {@code size} bytes. */
    static Result read(LedgerHandle lh, long last, int batch, int inFlight, int size) throws Exception {
        int requests = (int) ((last + batch) / batch);
        long[] lat = new long[requests];
        Semaphore window = new Semaphore(inFlight);
        AtomicLong entries = new AtomicLong();
        AtomicReference<String> failure = new AtomicReference<>();
        long cpu0 = BenchWrite.processCpuNanos();
        long start = System.nanoTime();
        for (int i = 0; i < requests && failure.get() == null; i++) {
            window.acquire();
            final int index = i;
            final long from = (long) i * batch;
            final long to = Math.min(last, from + batch - 1);
            final long t0 = System.nanoTime();
            lh.asyncReadEntries(from, to, (rc, h, seq, ctx) -> {
                lat[index] = System.nanoTime() - t0;
                if (rc != BKException.Code.OK) {
                    failure.compareAndSet(null, "entries " + from + "-" + to + ": " + BKException.getMessage(rc));
                } else {
                    long n = 0;
                    while (seq.hasMoreElements()) {
                        LedgerEntry e = seq.nextElement();
                        if (e.getEntry().length != size) {
                            failure.compareAndSet(null, "entry " + e.getEntryId() + ": " + e.getLength() + " bytes");
                        }
                        n++;
                    }
                    if (n != to - from + 1) {
                        failure.compareAndSet(null, "entries " + from + "-" + to + ": " + n + " returned");
                    }
                    entries.addAndGet(n);
                }
                window.release();
            }, null);
        }
        if (!window.tryAcquire(inFlight, 300, TimeUnit.SECONDS)) {
            throw new IllegalStateException("reads did not complete within 300 s");
        }
        double elapsed = (System.nanoTime() - start) / 1e9;
        double cpu = (BenchWrite.processCpuNanos() - cpu0) / 1e9;
        if (failure.get() != null) {
            throw new IllegalStateException("read failed: " + failure.get());
        }
        return new Result(lat, elapsed, cpu);
    }
}
