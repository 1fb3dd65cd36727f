package dev.folio.interop;

import java.util.Arrays;
import java.util.Locale;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.bookkeeper.client.BKException;
import org.apache.bookkeeper.client.BookKeeper;
import org.apache.bookkeeper.client.BookKeeper.DigestType;
import org.apache.bookkeeper.client.LedgerHandle;
import org.apache.bookkeeper.conf.ClientConfiguration;

/**
 * The Java client's write benchmark for scripts/bench-vs-bookkeeper, in the manner of
 * BookKeeper's {@code BenchThroughputLatency} (whose {@code bookkeeper-benchmark} artifact Maven
 * Central does not serve): one ledger, {@code asyncAddEntry} with a semaphore keeping
 * {@code --in-flight} appends outstanding, each append's latency from the call to its callback,
 * for {@code --seconds}. A warm-up ledger is written first (not measured) so the JIT has compiled
 * the client. The client's 5000 adds/s rate limit is off ({@code throttle=0}). Prints the same
 * JSON object as {@code folio bench write --json}.
 *
 * <pre>java -cp CLASSPATH dev.folio.interop.BenchWrite --metadata zk+null://HOST:PORT/ROOT
 *     [-e 3] [-w 3] [-a 2] [--entry-size 1024] [--in-flight 128] [--seconds 15] [--entries N]
 *     [--warmup 3]</pre>
 * A run stops after {@code --entries} appends or {@code --seconds}, whichever comes first.
 */
public final class BenchWrite {
    private BenchWrite() {}

    public static void main(String[] args) throws Exception {
        String uri = null;
        int e = 3;
        int qw = 3;
        int qa = 2;
        int size = 1024;
        int inFlight = 128;
        double seconds = 15;
        double warmup = 3;
        long entries = Long.MAX_VALUE;
        for (int i = 0; i < args.length; i++) {
            String v = i + 1 < args.length ? args[i + 1] : null;
            switch (args[i]) {
                case "--metadata" -> uri = v;
                case "-e" -> e = Integer.parseInt(v);
                case "-w" -> qw = Integer.parseInt(v);
                case "-a" -> qa = Integer.parseInt(v);
                case "--entry-size" -> size = Integer.parseInt(v);
                case "--in-flight" -> inFlight = Integer.parseInt(v);
                case "--seconds" -> seconds = Double.parseDouble(v);
                case "--warmup" -> warmup = Double.parseDouble(v);
                case "--entries" -> entries = Long.parseLong(v);
                default -> {
                    System.err.println("BenchWrite: unknown argument " + args[i]);
                    System.exit(2);
                }
            }
            i++;
        }
        if (uri == null) {
            System.err.println("BenchWrite: --metadata URI is required");
            System.exit(2);
        }
        ClientConfiguration conf = new ClientConfiguration();
        conf.setMetadataServiceUri(uri);
        // The client's default rate limit (throttle = 5000 adds/s per client) would cap every
        // run at 5000 entries/s whatever the bookies do; the in-flight window is the limit here.
        conf.setThrottleValue(0);
        try (BookKeeper bk = new BookKeeper(conf)) {
            byte[] payload = new byte[size];
            new java.util.Random(42).nextBytes(payload);
            if (warmup > 0) {
                // A tenth of the measured volume at most: the disk is shared.
                run(bk, e, qw, qa, payload, inFlight, warmup,
                        entries == Long.MAX_VALUE ? Long.MAX_VALUE : Math.max(1, entries / 10));
            }
            Result r = run(bk, e, qw, qa, payload, inFlight, seconds, entries);
            long[] l = r.latenciesNanos;
            Arrays.sort(l);
            double mean = l.length == 0 ? 0 : Arrays.stream(l).average().orElse(0) / 1e6;
            System.out.println(String.format(Locale.ROOT,
                    "{\"bench\":\"java-write\",\"entries\":%d,\"seconds\":%.3f,\"entries_per_sec\":%.1f,"
                            + "\"mb_per_sec\":%.2f,\"latency_ms\":{\"p50\":%.3f,\"p99\":%.3f,\"p999\":%.3f,"
                            + "\"max\":%.3f,\"mean\":%.3f},\"ensemble\":%d,\"write_quorum\":%d,\"ack_quorum\":%d,"
                            + "\"entry_size\":%d,\"in_flight\":%d,\"ledgers\":1,\"phase_cpu_s\":%.3f}",
                    l.length, r.seconds, l.length / r.seconds, (double) l.length * size / 1e6 / r.seconds,
                    q(l, 0.50), q(l, 0.99), q(l, 0.999), l.length == 0 ? 0 : l[l.length - 1] / 1e6, mean,
                    e, qw, qa, size, inFlight, r.cpuSeconds));
        }
    }

    static double q(long[] sorted, double quantile) {
        if (sorted.length == 0) {
            return 0;
        }
        int i = (int) Math.ceil(quantile * sorted.length) - 1;
        return sorted[Math.max(0, Math.min(sorted.length - 1, i))] / 1e6;
    }

    record Result(long[] latenciesNanos, double seconds, double cpuSeconds) {}

    /**
     * The JVM process's CPU time so far (every thread: the client's, the JIT's, the
     * collector's), in nanoseconds. Read around a measured phase, it gives the driver's own
     * cost there, without the JVM's start and the warm-up ({@code phase_cpu_s}).
     */
    static long processCpuNanos() {
        return ((com.sun.management.OperatingSystemMXBean) java.lang.management.ManagementFactory
                .getOperatingSystemMXBean()).getProcessCpuTime();
    }

    static Result run(BookKeeper bk, int e, int qw, int qa, byte[] payload, int inFlight, double seconds,
            long entries) throws Exception {
        LedgerHandle lh = bk.createLedger(e, qw, qa, DigestType.CRC32C, "folio-bench".getBytes());
        Semaphore window = new Semaphore(inFlight);
        AtomicLong done = new AtomicLong();
        AtomicReference<String> failure = new AtomicReference<>();
        long[][] lat = {new long[1 << 16]};
        long cpu0 = processCpuNanos();
        long start = System.nanoTime();
        long end = start + (long) (seconds * 1e9);
        long sent = 0;
        while (sent < entries && System.nanoTime() < end && failure.get() == null) {
            window.acquire();
            final long t0 = System.nanoTime();
            final long index = sent++;
            lh.asyncAddEntry(payload, (rc, h, entryId, ctx) -> {
                long t = System.nanoTime() - t0;
                if (rc != BKException.Code.OK) {
                    failure.compareAndSet(null, "entry " + index + ": " + BKException.getMessage(rc));
                } else {
                    synchronized (lat) {
                        if (index >= lat[0].length) {
                            lat[0] = Arrays.copyOf(lat[0], Math.max(lat[0].length * 2, (int) index + 1));
                        }
                        lat[0][(int) index] = t;
                    }
                    done.incrementAndGet();
                }
                window.release();
            }, null);
        }
        if (!window.tryAcquire(inFlight, 300, TimeUnit.SECONDS)) {
            throw new IllegalStateException("appends did not complete within 300 s");
        }
        double elapsed = (System.nanoTime() - start) / 1e9;
        double cpu = (processCpuNanos() - cpu0) / 1e9;
        if (failure.get() != null) {
            throw new IllegalStateException("append failed: " + failure.get());
        }
        lh.close();
        bk.deleteLedger(lh.getId());
        return new Result(Arrays.copyOf(lat[0], (int) sent), elapsed, cpu);
    }
}
