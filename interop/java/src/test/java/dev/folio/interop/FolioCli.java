package dev.folio.interop;

import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

/**
 * Runs the Folio CLI ({@code folio --metadata zk://... ledger ...}) as a child process, with
 * payloads as hex lines so any byte survives; stdout lines are queued as they come (a writer's
 * {@code acked} lines arrive while it runs). Its stderr goes to the test's stderr.
 */
final class FolioCli implements AutoCloseable {
    static final HexFormat HEX = HexFormat.of();
    static final String PASSWORD = new String(FolioCluster.PASSWORD, StandardCharsets.UTF_8);

    final Process process;
    final BufferedWriter stdin;
    final BlockingQueue<String> lines = new LinkedBlockingQueue<>();
    private static final String EOF = "\u0000eof";

    private FolioCli(List<String> args) throws IOException {
        this(FolioCluster.folioMetadataUri(), args);
    }

    private FolioCli(String metadataUri, List<String> args) throws IOException {
        this(metadataUri, args, null, java.util.Map.of());
    }

    private FolioCli(String metadataUri, List<String> args, java.nio.file.Path stderr,
            java.util.Map<String, String> env) throws IOException {
        List<String> cmd = new ArrayList<>();
        cmd.add(FolioCluster.folioBin().toString());
        cmd.add("--metadata");
        cmd.add(metadataUri);
        cmd.addAll(args);
        ProcessBuilder pb = new ProcessBuilder(cmd);
        pb.environment().putAll(env);
        pb.redirectError(stderr == null ? ProcessBuilder.Redirect.INHERIT
                : ProcessBuilder.Redirect.appendTo(stderr.toFile()));
        process = pb.start();
        stdin = new BufferedWriter(new OutputStreamWriter(process.getOutputStream(), StandardCharsets.UTF_8));
        Thread reader = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(
                    new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8))) {
                String line;
                while ((line = r.readLine()) != null) {
                    lines.add(line);
                }
            } catch (IOException e) {
                lines.add("\u0000error " + e);
            }
            lines.add(EOF);
        }, "folio-cli-stdout");
        reader.setDaemon(true);
        reader.start();
    }

    static FolioCli start(String... args) throws IOException {
        return new FolioCli(List.of(args));
    }

    /** The CLI with extra environment variables, its stderr appended to {@code stderr}. */
    static FolioCli startLogged(java.nio.file.Path stderr, java.util.Map<String, String> env, String... args)
            throws IOException {
        return new FolioCli(FolioCluster.folioMetadataUri(), List.of(args), stderr, env);
    }

    /** The CLI against another cluster's metadata ({@code --metadata uri}). */
    static FolioCli startOn(String metadataUri, String... args) throws IOException {
        return new FolioCli(metadataUri, List.of(args));
    }

    /** The next stdout line, or null at the end of the output; fails after 300 s of silence. */
    String nextLine() throws InterruptedException {
        String l = lines.poll(300, TimeUnit.SECONDS);
        if (l == null) {
            throw new AssertionError("folio printed nothing for 300 s");
        }
        if (l.startsWith("\u0000error")) {
            throw new AssertionError("reading folio's output: " + l.substring(1));
        }
        return l == EOF ? null : l;
    }

    /** Waits for the next line, which must start with {@code prefix + " "}; returns the rest. */
    String expect(String prefix) throws InterruptedException {
        String l = nextLine();
        if (l == null || !l.startsWith(prefix + " ")) {
            throw new AssertionError("expected a '" + prefix + " ...' line from folio, got " + l);
        }
        return l.substring(prefix.length() + 1);
    }

    void writeEntry(byte[] payload) throws IOException {
        stdin.write(HEX.formatHex(payload));
        stdin.write('\n');
        stdin.flush();
    }

    /** Waits for the exit; returns the exit status. */
    int waitFor() throws InterruptedException {
        if (!process.waitFor(300, TimeUnit.SECONDS)) {
            process.destroyForcibly();
            throw new AssertionError("folio did not exit within 300 s");
        }
        return process.exitValue();
    }

    @Override
    public void close() {
        if (process.isAlive()) {
            process.destroyForcibly();
        }
    }

    /** `folio ledger read <id> --hex`: every printed entry, in order, checked for consecutive ids. */
    static List<byte[]> readLedger(long id, String... extra) throws Exception {
        return readLedgerOn(FolioCluster.folioMetadataUri(), id, extra);
    }

    static List<byte[]> readLedgerOn(String metadataUri, long id, String... extra) throws Exception {
        List<String> args = new ArrayList<>(List.of("ledger", "read", Long.toString(id), "--hex",
                "--password", PASSWORD));
        args.addAll(List.of(extra));
        try (FolioCli cli = new FolioCli(metadataUri, args)) {
            List<byte[]> entries = new ArrayList<>();
            String l;
            while ((l = cli.nextLine()) != null) {
                int tab = l.indexOf('\t');
                if (tab < 0) {
                    throw new AssertionError("not an '<entryId>\\t<payload>' line: " + l);
                }
                long entryId = Long.parseLong(l.substring(0, tab));
                if (entryId != entries.size()) {
                    throw new AssertionError("expected entry " + entries.size() + ", got " + entryId);
                }
                entries.add(HEX.parseHex(l, tab + 1, l.length()));
            }
            int rc = cli.waitFor();
            if (rc != 0) {
                throw new AssertionError("folio ledger read exited " + rc);
            }
            return entries;
        }
    }

    /** A process's stdout read on a daemon thread (so it never blocks on a full pipe), line by line. */
    static final class LineReader {
        private final BlockingQueue<String> queue = new LinkedBlockingQueue<>();

        LineReader(java.io.InputStream in) {
            Thread t = new Thread(() -> {
                try (BufferedReader r = new BufferedReader(new InputStreamReader(in, StandardCharsets.UTF_8))) {
                    String line;
                    while ((line = r.readLine()) != null) {
                        queue.add(line);
                    }
                } catch (IOException e) {
                    // The process ended; next() reports the end.
                }
                queue.add(EOF);
            }, "stdout-reader");
            t.setDaemon(true);
            t.start();
        }

        /** The next line, or null at the end; fails after {@code seconds} of silence. */
        String next(long seconds) throws InterruptedException {
            String l = queue.poll(seconds, TimeUnit.SECONDS);
            if (l == null) {
                throw new AssertionError("no output for " + seconds + " s");
            }
            return l == EOF ? null : l;
        }
    }
}
