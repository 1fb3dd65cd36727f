package dev.folio.interop;

import java.io.File;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * Apache BookKeeper's own autorecovery daemon, {@code org.apache.bookkeeper.replication.AutoRecoveryMain}
 * (its Auditor candidate and its ReplicationWorker, as {@code bookkeeper autorecovery} runs them),
 * from the same 4.18.2 artifacts as the client, in a child JVM on the Folio cluster's ZooKeeper.
 * It stands in the Auditor election as {@code 127.0.0.1:<port>} (its "bookie address"; nothing
 * listens there). Timings are shortened for a test; its INFO log goes to {@code <dir>/autorecovery.log}.
 */
final class JavaAutoRecovery implements AutoCloseable {
    final Path dir;
    final String id;
    final Path log;
    private final Process process;

    private JavaAutoRecovery(Path dir, String id, Process process) {
        this.dir = dir;
        this.id = id;
        this.log = dir.resolve("autorecovery.log");
        this.process = process;
    }

    static JavaAutoRecovery start(Path dir) throws IOException {
        Files.createDirectories(dir);
        int port = JavaBookie.freePort();
        String conf = String.join("\n",
                "metadataServiceUri=" + FolioCluster.javaMetadataUri(),
                "zkTimeout=30000",
                "bookiePort=" + port,
                "advertisedAddress=127.0.0.1",
                "allowLoopback=true",
                "useHostNameAsBookieID=false",
                "httpServerEnabled=false",
                // An audit at once when a bookie goes, and a periodic one every 30 s.
                "lostBookieRecoveryDelay=0",
                "auditorPeriodicBookieCheckInterval=30",
                // No checkAllLedgers (it would open every ledger of the suite), no placement
                // or replicas checks.
                "auditorPeriodicCheckInterval=0",
                "auditorPeriodicPlacementPolicyCheckInterval=0",
                "auditorReplicasCheckInterval=0",
                // Retry quickly: an open ledger's writer gets 5 s, a failed ledger is retried
                // after 1 s doubling to 16 s, a client error waits 1 s.
                "openLedgerRereplicationGracePeriod=5000",
                "lockReleaseOfFailedLedgerGracePeriod=32000",
                "rwRereplicateBackoffMs=1000",
                "");
        Path confFile = dir.resolve("autorecovery.conf");
        Files.writeString(confFile, conf);
        // INFO, with the attributes BookKeeper's structured log puts in the context (ledgerId=...).
        Path log4j = dir.resolve("log4j2.xml");
        Files.writeString(log4j, String.join("\n",
                "<Configuration status=\"WARN\"><Appenders><Console name=\"out\" target=\"SYSTEM_OUT\">",
                "<PatternLayout pattern=\"%d{HH:mm:ss.SSS} %-5level [%t] %c{1} - %msg %X%n\"/></Console></Appenders>",
                "<Loggers><Root level=\"INFO\"><AppenderRef ref=\"out\"/></Root></Loggers></Configuration>", ""));
        List<String> cmd = new ArrayList<>();
        cmd.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        cmd.addAll(List.of("-Xms64m", "-Xmx256m", "-XX:MaxDirectMemorySize=256m",
                "-Dio.netty.leakDetection.level=disabled",
                "-Dlog4j2.configurationFile=" + log4j,
                "-cp", System.getProperty("java.class.path"),
                "org.apache.bookkeeper.replication.AutoRecoveryMain", "-c", confFile.toString()));
        File logFile = dir.resolve("autorecovery.log").toFile();
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true)
                .redirectOutput(ProcessBuilder.Redirect.appendTo(logFile)).start();
        return new JavaAutoRecovery(dir, "127.0.0.1:" + port, p);
    }

    boolean alive() {
        return process.isAlive();
    }

    /** SIGTERM: its shutdown hook stops the daemons and closes the ZooKeeper session. */
    void stop() throws InterruptedException {
        if (process.isAlive()) {
            process.destroy();
            if (!process.waitFor(60, TimeUnit.SECONDS)) {
                process.destroyForcibly();
                process.waitFor(60, TimeUnit.SECONDS);
            }
        }
    }

    List<String> logLines() throws IOException {
        return Files.exists(log) ? Files.readAllLines(log) : List.of();
    }

    String tail() {
        try {
            List<String> lines = logLines();
            return String.join("\n", lines.subList(Math.max(0, lines.size() - 40), lines.size()));
        } catch (IOException e) {
            return "(no log: " + e + ")";
        }
    }

    @Override
    public void close() throws InterruptedException {
        stop();
    }
}
