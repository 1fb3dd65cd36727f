//! The controls every test server has, written once: a server type with the fields
//! `process: ServerProcess` and `addr: SocketAddr` gets them with `server_controls!()` inside
//! its `impl` block (its own `start`, `restart` and URI helpers stay beside them).

macro_rules! server_controls {
    () => {
        /// The loopback address clients connect to.
        pub fn addr(&self) -> std::net::SocketAddr {
            self.addr
        }

        /// Whether the server process is still alive.
        pub fn is_running(&mut self) -> bool {
            self.process.is_running()
        }

        /// Stops the server gracefully (SIGTERM, then SIGKILL after 10 s) and waits for it to
        /// exit; its port then refuses connections. The directory is deleted on drop.
        /// Idempotent.
        pub fn stop(&mut self) {
            self.process.stop($crate::process::STOP_GRACE);
        }

        /// Kills the server at once (SIGKILL), like a crash. Idempotent.
        pub fn kill(&mut self) {
            self.process.kill();
        }

        /// The server's output so far (for diagnosing a failed test).
        pub fn log(&self) -> String {
            self.process.log_tail()
        }

        /// The server's temporary directory (deleted on drop).
        pub fn dir(&self) -> std::path::PathBuf {
            self.process.dir.path().to_path_buf()
        }
    };
}
