//! Generates the v3 protobuf types from `proto/BookkeeperProtocol.proto` with prost, using protox
//! (pure Rust) to parse the file, so building needs no `protoc` binary.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto = "proto/BookkeeperProtocol.proto";
    println!("cargo:rerun-if-changed={proto}");
    let fds = protox::compile([proto], ["proto"])?;
    prost_build::Config::new()
        // Entry bodies, master keys and LAC bodies stay zero-copy slices of the received frame.
        .bytes(["."])
        .compile_fds(fds)?;
    Ok(())
}
