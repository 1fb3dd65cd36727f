// Folio's copy (see ../README.md): the only change from etcd-client 0.21.1 is here. The
// .proto files are parsed by protox (pure Rust) and handed to tonic-prost-build as a file
// descriptor set, so building needs no `protoc` binary or system package.

#[cfg(feature = "build-server")]
fn should_build_server() -> bool {
    true
}

#[cfg(not(feature = "build-server"))]
fn should_build_server() -> bool {
    false
}

fn main() {
    let proto_root = "proto";
    println!("cargo:rerun-if-changed={proto_root}");

    let fds = protox::compile(
        [
            "proto/etcd/api/authpb/auth.proto",
            "proto/etcd/api/etcdserverpb/rpc.proto",
            "proto/etcd/api/mvccpb/kv.proto",
            "proto/etcd/server/etcdserver/api/v3election/v3electionpb/v3election.proto",
            "proto/etcd/server/etcdserver/api/v3lock/v3lockpb/v3lock.proto",
        ],
        [proto_root],
    )
    .expect("Failed to parse proto files");
    tonic_prost_build::configure()
        .build_server(should_build_server())
        .compile_fds(fds)
        .expect("Failed to compile proto files");
}
