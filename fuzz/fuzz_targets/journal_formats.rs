//! Journal bytes as a crash or a bad disk leaves them: arbitrary file headers, record headers
//! and mark files through their decoders, and whole files through the replay scan a
//! restarting bookie runs (written to a tmpfs file, as the scan reads through the file
//! seam). Nothing may panic; a mark that decodes must encode back to the same bytes; every
//! record the scan hands out must carry a valid checksum over what it holds.
#![no_main]

use std::sync::atomic::{AtomicU64, Ordering};

use folio_storage::journal::format::{self, RecordHeader, RECORD_HEADER_LEN};
use folio_storage::journal::scan_file;
use libfuzzer_sys::fuzz_target;

static FILES: AtomicU64 = AtomicU64::new(0);

fuzz_target!(|data: &[u8]| {
    let _ = format::decode_header(data, 7);
    if data.len() >= RECORD_HEADER_LEN {
        let h = RecordHeader::parse(&data[..RECORD_HEADER_LEN]);
        if h.plausible(data.len() as u64) {
            for version in format::OLDEST_VERSION..=format::FORMAT_VERSION {
                let _ = h.checksum_ok(version, 7, data);
            }
        }
    }
    if let Ok(p) = format::decode_mark(data) {
        assert_eq!(format::encode_mark(p).as_slice(), data);
    }

    // A journal file: a valid header (else the scan stops at once) then the fuzzer's bytes.
    let file_id = 0x1f;
    let dir = std::env::temp_dir().join(format!(
        "folio-fuzz-journal-{}-{}",
        std::process::id(),
        FILES.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{file_id:016x}.txn"));
    let mut bytes = format::encode_header(file_id).to_vec();
    bytes.extend_from_slice(data);
    std::fs::write(&path, &bytes).unwrap();
    let fs = folio_env::RealFileSystem;
    let _ = scan_file(&fs, &path, &mut |offset, record| {
        assert!(offset >= format::HEADER_LEN && offset < bytes.len() as u64);
        let _ = record;
    });
    std::fs::remove_dir_all(&dir).unwrap();
});
