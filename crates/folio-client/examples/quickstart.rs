//! A runnable tour of the client API: `cargo run -p folio-client --example quickstart`.
//!
//! Starts three bookies in this process (the bookie's TCP server over its in-memory
//! storage, on ephemeral loopback ports) registered in a `mem://` metadata store, then:
//! writes a ledger with pipelined appends, tails it from a second reader, fences the
//! writer by opening the ledger with recovery, and reads everything back.

use std::sync::Arc;
use std::time::Duration;

use folio_bookie::memory::MemoryStorage;
use folio_bookie::server::{BookieServer, ServerConfig};
use folio_bookie::{Processor, ProcessorConfig};
use folio_client::{Client, ClientConfig, CreateOptions, DigestType, OpenOptions};
use folio_metadata::mem::MemCluster;
use folio_metadata::{BookieMode, BookieServiceInfo, MetadataStore};
use folio_types::BookieId;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A metadata store and three bookies.
    let metadata: Arc<dyn MetadataStore> = Arc::new(MemCluster::new("quickstart").connect());
    metadata.init_cluster().await?;
    let mut registrations = Vec::new();
    for _ in 0..3 {
        let processor = Processor::new(Arc::new(MemoryStorage::new()), ProcessorConfig::default());
        let server = BookieServer::bind("127.0.0.1:0", processor, ServerConfig::default())
            .await?
            .start();
        let id = BookieId::new(server.local_addr().to_string())?;
        registrations.push((
            server,
            metadata
                .register_bookie(&id, BookieMode::Writable, &BookieServiceInfo::default())
                .await?,
        ));
        println!("bookie {id} up");
    }

    // Write: appends pipeline; their futures complete in entry order.
    let writer_client = Client::connect(metadata.clone(), ClientConfig::default()).await?;
    let writer = writer_client
        .create_ledger(
            CreateOptions::default()
                .quorum(3, 2, 2)
                .digest(DigestType::Crc32c)
                .password("secret"),
        )
        .await?;
    println!("ledger {}", writer.id());
    let acks: Vec<_> = (0..10)
        .map(|i| writer.append(format!("entry number {i}")))
        .collect();
    for ack in acks {
        println!("acked {}", ack.await?);
    }

    // Tail without recovery: the reader sees the confirmed prefix and can wait for more.
    let reader_client = Client::connect(metadata.clone(), ClientConfig::default()).await?;
    let tail = reader_client
        .open_ledger(writer.id(), b"secret", OpenOptions::no_recovery())
        .await?;
    println!("tailing reader sees LAC {}", tail.last_add_confirmed());
    let next = writer.append("entry number 10");
    let lac = tail
        .wait_for_lac_beyond(tail.last_add_confirmed(), Duration::from_secs(5))
        .await?;
    println!(
        "long poll woke with LAC {lac}; append returned {}",
        next.await?
    );

    // Open with recovery: fences the writer, recovers the tail, closes the ledger.
    let reader = reader_client
        .open_ledger(writer.id(), b"secret", OpenOptions::recovery())
        .await?;
    println!("recovered: last entry {}", reader.last_add_confirmed());
    match writer.append("too late").await {
        Err(e) => println!("the old writer is stopped: {e}"),
        Ok(id) => return Err(format!("append {id} after fencing").into()),
    }
    for entry in reader.read(0, reader.last_add_confirmed()).await? {
        println!(
            "{}\t{}",
            entry.entry_id,
            String::from_utf8_lossy(&entry.payload)
        );
    }

    for (server, registration) in registrations {
        registration.unregister().await?;
        server.shutdown().await;
    }
    Ok(())
}
