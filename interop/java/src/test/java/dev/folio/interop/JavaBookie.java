package dev.folio.interop;

import java.io.File;
import java.io.IOException;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.bookkeeper.client.BookKeeperAdmin;
import org.apache.bookkeeper.net.BookieId;

/**
 * An Apache BookKeeper bookie (the unmodified {@code org.apache.bookkeeper.server.Main} from the
 * same Maven artifacts as the client) in a child JVM, registered on the Folio cluster's
 * ZooKeeper: it finds the instance id and layout Folio's {@code initnewcluster} wrote, writes its
 * cookie there, and serves ledgers beside the Folio bookies. Journal fsync on, DbLedgerStorage,
 * loopback address; its output goes to {@code <dir>/bookie.log}.
 */
final class JavaBookie implements AutoCloseable {
    final Path dir;
    final int port;
    final String id;
    private final String metadataUri;
    private final List<String> extraConf;
    private Process process;

    private JavaBookie(Path dir, int port, String metadataUri, List<String> extraConf) {
        this.dir = dir;
        this.port = port;
        this.id = "127.0.0.1:" + port;
        this.metadataUri = metadataUri;
        this.extraConf = extraConf;
    }

    static int freePort() throws IOException {
        try (ServerSocket s = new ServerSocket(0)) {
            return s.getLocalPort();
        }
    }

    /** Writes the bookie's configuration under {@code dir} and starts it; does not wait. */
    static JavaBookie start(Path dir) throws IOException {
        return start(dir, FolioCluster.javaMetadataUri(), List.of());
    }

    /** As {@link #start(Path)}, on another cluster ({@code zk+null://...}), with extra configuration lines. */
    static JavaBookie start(Path dir, String metadataUri, List<String> extraConf) throws IOException {
        JavaBookie b = new JavaBookie(dir, freePort(), metadataUri, extraConf);
        b.launch();
        return b;
    }

    private void launch() throws IOException {
        Files.createDirectories(dir.resolve("journal"));
        Files.createDirectories(dir.resolve("ledgers"));
        List<String> lines = new ArrayList<>(List.of(
                "bookiePort=" + port,
                "advertisedAddress=127.0.0.1",
                "allowLoopback=true",
                "useHostNameAsBookieID=false",
                "metadataServiceUri=" + metadataUri,
                "zkTimeout=30000",
                "journalDirectories=" + dir.resolve("journal"),
                "ledgerDirectories=" + dir.resolve("ledgers"),
                "ledgerStorageClass=org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage",
                "journalSyncData=true",
                "dbStorage_writeCacheMaxSizeMb=64",
                "dbStorage_readAheadCacheMaxSizeMb=32",
                "dbStorage_rocksDB_blockCacheSize=33554432",
                // The host's disk may be nearly full; that must never fail a test.
                "diskUsageThreshold=0.999",
                "diskUsageWarnThreshold=0.998",
                "diskUsageLwmThreshold=0.998",
                "httpServerEnabled=false",
                "autoRecoveryDaemonEnabled=false"));
        lines.addAll(extraConf);
        lines.add("");
        String conf = String.join("\n", lines);
        Path confFile = dir.resolve("bk.conf");
        Files.writeString(confFile, conf);
        List<String> cmd = new ArrayList<>();
        cmd.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        cmd.addAll(List.of("-Xms64m", "-Xmx256m", "-XX:MaxDirectMemorySize=256m",
                "-Dio.netty.leakDetection.level=disabled",
                "-cp", System.getProperty("java.class.path"),
                "org.apache.bookkeeper.server.Main", "--conf", confFile.toString()));
        File log = dir.resolve("bookie.log").toFile();
        process = new ProcessBuilder(cmd).redirectErrorStream(true)
                .redirectOutput(ProcessBuilder.Redirect.appendTo(log)).start();
    }

    /** Waits until the bookie is registered as writable (it has read the cookie and instance id). */
    void awaitRegistered(BookKeeperAdmin admin) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(180);
        while (System.nanoTime() < deadline) {
            if (!process.isAlive()) {
                throw new AssertionError("Java bookie " + id + " exited " + process.exitValue()
                        + ":\n" + tail());
            }
            if (admin.getAvailableBookies().contains(BookieId.parse(id))) {
                return;
            }
            Thread.sleep(200);
        }
        throw new AssertionError("Java bookie " + id + " did not register within 180 s:\n" + tail());
    }

    /** Waits until the bookie's registration is gone (after {@link #stop}). */
    void awaitUnregistered(BookKeeperAdmin admin) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
        while (System.nanoTime() < deadline) {
            if (!admin.getAvailableBookies().contains(BookieId.parse(id))) {
                return;
            }
            Thread.sleep(200);
        }
        throw new AssertionError("Java bookie " + id + " still registered 120 s after it stopped");
    }

    boolean alive() {
        return process != null && process.isAlive();
    }

    /** Stops the bookie (SIGTERM: its shutdown hook closes the ZooKeeper session). */
    void stop() throws InterruptedException {
        if (process != null && process.isAlive()) {
            process.destroy();
            if (!process.waitFor(60, TimeUnit.SECONDS)) {
                process.destroyForcibly();
                process.waitFor(60, TimeUnit.SECONDS);
            }
        }
    }

    /** Starts the bookie again on the same port and directories (same cookie). */
    void restart() throws IOException, InterruptedException {
        stop();
        launch();
    }

    String tail() {
        try {
            List<String> lines = Files.readAllLines(dir.resolve("bookie.log"));
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
