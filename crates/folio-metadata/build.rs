//! Generates the Rust types of BookKeeper's DataFormats.proto with prost, parsing the
//! .proto with protox so that no `protoc` binary is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/DataFormats.proto");
    let fds = protox::compile(["proto/DataFormats.proto"], ["proto"])?;
    let mut config = prost_build::Config::new();
    // BTreeMap keeps the properties map's encoding order stable, so the same record
    // always serializes to the same bytes on every driver.
    config.btree_map(["."]);
    config.compile_fds(fds)?;
    Ok(())
}
