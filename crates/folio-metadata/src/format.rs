//! BookKeeper's serialization of the records a metadata store holds, byte for byte:
//! ledger metadata (`LedgerMetadataSerDe`, format version 3: a text header line then a
//! length-delimited binary `LedgerMetadataFormat`) and the bookie registration value
//! (`BookieServiceInfoFormat`). Every driver stores these bytes, so a Java BookKeeper
//! client reading Folio's ZooKeeper sees what it would have written itself.

use std::collections::{BTreeMap, BTreeSet};

use folio_types::metadata::{DigestType, LedgerMetadata, LedgerState};
use folio_types::{BookieId, LedgerId};
use prost::Message;

use crate::store::{BookieServiceInfo, Endpoint};
use crate::{MetadataError, Result};

/// The prost types generated from `proto/DataFormats.proto` (BookKeeper's field numbers).
pub mod dataformats {
    #![allow(clippy::all, missing_docs)]
    include!(concat!(env!("OUT_DIR"), "/folio.metadata.dataformats.rs"));
}

use dataformats::ledger_metadata_format as lmf;
use dataformats::{BookieServiceInfoFormat, LedgerMetadataFormat};

/// The header line's prefix: `BookieMetadataFormatVersion`, a TAB, the version, `\n`.
pub const METADATA_HEADER: &str = "BookieMetadataFormatVersion\t";

/// The only format version Folio reads and writes: binary protobuf.
pub const METADATA_FORMAT_V3: u32 = 3;

/// Serializes ledger metadata as BookKeeper's format version 3.
/// Refuses metadata that breaks its own invariants or asks for another format version.
pub fn encode_ledger_metadata(m: &LedgerMetadata) -> Result<Vec<u8>> {
    if m.metadata_format_version != METADATA_FORMAT_V3 {
        return Err(MetadataError::InvalidArgument(format!(
            "ledger metadata format version {} cannot be written, only version {METADATA_FORMAT_V3}",
            m.metadata_format_version
        )));
    }
    m.validate().map_err(MetadataError::InvalidArgument)?;
    let to_i32 = |what: &str, v: usize| {
        i32::try_from(v)
            .map_err(|_| MetadataError::InvalidArgument(format!("{what} {v} is too large")))
    };
    let length = i64::try_from(m.length).map_err(|_| {
        MetadataError::InvalidArgument(format!("ledger length {} is too large", m.length))
    })?;
    let (digest_type, password) = match &m.password {
        Some(p) => (Some(digest_to_proto(m.digest_type) as i32), Some(p.clone())),
        None => (None, None),
    };
    let msg = LedgerMetadataFormat {
        quorum_size: to_i32("write quorum", m.write_quorum)?,
        ensemble_size: to_i32("ensemble size", m.ensemble_size)?,
        length,
        last_entry_id: Some(m.last_entry_id),
        state: state_to_proto(m.state) as i32,
        segment: m
            .ensembles
            .iter()
            .map(|(first, ensemble)| lmf::Segment {
                ensemble_member: ensemble.iter().map(|b| b.as_str().to_owned()).collect(),
                first_entry_id: *first,
            })
            .collect(),
        digest_type,
        password,
        ack_quorum_size: Some(to_i32("ack quorum", m.ack_quorum)?),
        ctime: m.ctime,
        custom_metadata: m
            .custom_metadata
            .iter()
            .map(|(k, v)| lmf::CMetadataMapEntry {
                key: Some(k.clone()),
                value: Some(v.clone()),
            })
            .collect(),
        c_token: Some(m.c_token),
    };
    let mut out = format!("{METADATA_HEADER}{METADATA_FORMAT_V3}\n").into_bytes();
    msg.encode_length_delimited(&mut out)
        .map_err(|e| MetadataError::Internal(format!("encoding ledger metadata: {e}")))?;
    Ok(out)
}

/// Parses the bytes of ledger `ledger`'s metadata record. Any defect is a `Corrupt`
/// error naming the ledger and what is wrong; never a panic.
pub fn decode_ledger_metadata(ledger: LedgerId, bytes: &[u8]) -> Result<LedgerMetadata> {
    let corrupt =
        |reason: String| MetadataError::corrupt(format!("metadata of ledger {ledger}"), reason);
    let Some(rest) = bytes.strip_prefix(METADATA_HEADER.as_bytes()) else {
        return Err(corrupt(format!(
            "it does not start with the header {METADATA_HEADER:?} ({} bytes)",
            bytes.len()
        )));
    };
    let Some(newline) = rest.iter().take(11).position(|b| *b == b'\n') else {
        return Err(corrupt("the format version line is not terminated".into()));
    };
    let version: u32 = std::str::from_utf8(&rest[..newline])
        .ok()
        .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            corrupt(format!(
                "bad format version {:?}",
                String::from_utf8_lossy(&rest[..newline])
            ))
        })?;
    if version != METADATA_FORMAT_V3 {
        return Err(corrupt(format!(
            "format version {version} is not supported (only {METADATA_FORMAT_V3}, binary protobuf)"
        )));
    }
    let msg = LedgerMetadataFormat::decode_length_delimited(&rest[newline + 1..])
        .map_err(|e| corrupt(format!("bad protobuf body: {e}")))?;
    from_proto(msg, version).map_err(corrupt)
}

fn from_proto(
    msg: LedgerMetadataFormat,
    version: u32,
) -> std::result::Result<LedgerMetadata, String> {
    let size = |what: &str, v: i32| usize::try_from(v).map_err(|_| format!("negative {what} {v}"));
    let write_quorum = size("write quorum", msg.quorum_size)?;
    let ensemble_size = size("ensemble size", msg.ensemble_size)?;
    let ack_quorum = match msg.ack_quorum_size {
        Some(a) => size("ack quorum", a)?,
        None => write_quorum,
    };
    let state = match lmf::State::try_from(msg.state) {
        Ok(lmf::State::Open) => LedgerState::Open,
        Ok(lmf::State::InRecovery) => LedgerState::InRecovery,
        Ok(lmf::State::Closed) => LedgerState::Closed,
        Err(_) => return Err(format!("unknown ledger state {}", msg.state)),
    };
    let mut ensembles = BTreeMap::new();
    for segment in msg.segment {
        let members = segment
            .ensemble_member
            .into_iter()
            .map(|s| BookieId::new(s).map_err(|e| e.to_string()))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        if ensembles.insert(segment.first_entry_id, members).is_some() {
            return Err(format!(
                "two ensembles start at entry {}",
                segment.first_entry_id
            ));
        }
    }
    let (digest_type, password) = match msg.password {
        Some(p) => {
            let d = msg.digest_type.unwrap_or(lmf::DigestType::Crc32 as i32);
            let d = match lmf::DigestType::try_from(d) {
                Ok(lmf::DigestType::Crc32) => DigestType::Crc32,
                Ok(lmf::DigestType::Hmac) => DigestType::Mac,
                Ok(lmf::DigestType::Crc32c) => DigestType::Crc32c,
                Ok(lmf::DigestType::Dummy) => DigestType::Dummy,
                Err(_) => return Err(format!("unknown digest type {d}")),
            };
            (d, Some(p))
        }
        None => (DigestType::Crc32, None),
    };
    // As BookKeeper: the last entry id and length only mean something once closed.
    let (last_entry_id, length) = if state == LedgerState::Closed {
        let last = msg.last_entry_id.unwrap_or(folio_types::INVALID_ENTRY_ID);
        let length =
            u64::try_from(msg.length).map_err(|_| format!("negative length {}", msg.length))?;
        (last, length)
    } else {
        (folio_types::INVALID_ENTRY_ID, 0)
    };
    let mut custom_metadata = BTreeMap::new();
    for entry in msg.custom_metadata {
        custom_metadata.insert(
            entry.key.unwrap_or_default(),
            entry.value.unwrap_or_default(),
        );
    }
    let m = LedgerMetadata {
        metadata_format_version: version,
        state,
        ensemble_size,
        write_quorum,
        ack_quorum,
        ensembles,
        last_entry_id,
        length,
        digest_type,
        password,
        custom_metadata,
        ctime: msg.ctime,
        c_token: msg.c_token.unwrap_or(0),
    };
    m.validate()?;
    Ok(m)
}

fn state_to_proto(s: LedgerState) -> lmf::State {
    match s {
        LedgerState::Open => lmf::State::Open,
        LedgerState::InRecovery => lmf::State::InRecovery,
        LedgerState::Closed => lmf::State::Closed,
    }
}

fn digest_to_proto(d: DigestType) -> lmf::DigestType {
    match d {
        DigestType::Crc32 => lmf::DigestType::Crc32,
        DigestType::Mac => lmf::DigestType::Hmac,
        DigestType::Crc32c => lmf::DigestType::Crc32c,
        DigestType::Dummy => lmf::DigestType::Dummy,
    }
}

/// Serializes a bookie's registration value (binary `BookieServiceInfoFormat`).
/// An empty info serializes to no bytes, which BookKeeper reads as "the id is host:port".
pub fn encode_bookie_service_info(info: &BookieServiceInfo) -> Vec<u8> {
    if info.endpoints.is_empty() && info.properties.is_empty() {
        return Vec::new();
    }
    let msg = BookieServiceInfoFormat {
        endpoints: info
            .endpoints
            .iter()
            .map(|e| dataformats::bookie_service_info_format::Endpoint {
                id: e.id.clone(),
                port: i32::from(e.port),
                host: e.host.clone(),
                protocol: e.protocol.clone(),
                auth: e.auth.clone(),
                extensions: e.extensions.clone(),
            })
            .collect(),
        properties: info.properties.clone(),
    };
    msg.encode_to_vec()
}

/// Parses a registration value; `bookie` names the record in errors.
pub fn decode_bookie_service_info(bookie: &BookieId, bytes: &[u8]) -> Result<BookieServiceInfo> {
    let corrupt =
        |reason: String| MetadataError::corrupt(format!("registration of bookie {bookie}"), reason);
    let msg = BookieServiceInfoFormat::decode(bytes)
        .map_err(|e| corrupt(format!("bad protobuf: {e}")))?;
    let mut endpoints = Vec::with_capacity(msg.endpoints.len());
    for e in msg.endpoints {
        let port = u16::try_from(e.port)
            .map_err(|_| corrupt(format!("bad port {} of endpoint {:?}", e.port, e.id)))?;
        endpoints.push(Endpoint {
            id: e.id,
            host: e.host,
            port,
            protocol: e.protocol,
            auth: e.auth,
            extensions: e.extensions,
        });
    }
    Ok(BookieServiceInfo {
        endpoints,
        properties: msg.properties,
    })
}

/// The value of an under-replication mark, in binary `UnderreplicatedLedgerFormat`
/// (drivers that must match BookKeeper's ZooKeeper text format write that instead).
pub fn encode_underreplicated(missing: &BTreeSet<BookieId>, ctime: Option<i64>) -> Vec<u8> {
    dataformats::UnderreplicatedLedgerFormat {
        replica: missing.iter().map(|b| b.as_str().to_owned()).collect(),
        ctime,
    }
    .encode_to_vec()
}

/// Parses [`encode_underreplicated`]'s bytes; `ledger` names the record in errors.
pub fn decode_underreplicated(
    ledger: LedgerId,
    bytes: &[u8],
) -> Result<(BTreeSet<BookieId>, Option<i64>)> {
    let corrupt = |reason: String| {
        MetadataError::corrupt(format!("under-replication mark of ledger {ledger}"), reason)
    };
    let msg = dataformats::UnderreplicatedLedgerFormat::decode(bytes)
        .map_err(|e| corrupt(format!("bad protobuf: {e}")))?;
    let missing = msg
        .replica
        .into_iter()
        .map(|s| BookieId::new(s).map_err(|e| corrupt(e.to_string())))
        .collect::<Result<BTreeSet<_>>>()?;
    Ok((missing, msg.ctime))
}

/// The value of an Auditor check's ctime record: BookKeeper's binary `CheckAllLedgersFormat`,
/// `PlacementPolicyCheckFormat` or `ReplicasCheckFormat` (all three are `{1: optional int64}`,
/// so one encoding serves them).
pub fn encode_check_ctime(ctime_ms: i64) -> Vec<u8> {
    dataformats::CheckAllLedgersFormat {
        check_all_ledgers_c_time: Some(ctime_ms),
    }
    .encode_to_vec()
}

/// Parses [`encode_check_ctime`]'s bytes; an absent field is `None` (BookKeeper's -1).
pub fn decode_check_ctime(check: crate::AuditorCheck, bytes: &[u8]) -> Result<Option<i64>> {
    let msg = dataformats::CheckAllLedgersFormat::decode(bytes)
        .map_err(|e| MetadataError::corrupt(check.record_name(), format!("bad protobuf: {e}")))?;
    Ok(msg.check_all_ledgers_c_time.filter(|&t| t >= 0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use folio_types::quorum::QuorumConfig;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// The test vector of spec section 5.7 (BookKeeper's TestLedgerMetadataSerDe).
    const VECTOR: &str = "426f6f6b69654d65746164617461466f726d617456657273696f6e0933 0a 60 0802 1003 1800 20ffffffffffffffffff01
        2801 3232 0a0e3139322e302e322e313a33313831 0a0e3139322e302e322e323a33313831 0a0e3139322e302e322e333a33313831 1000
        3803 4206666f6f626172 4801 50ffffffffffffffffff01 6000";

    fn vector_metadata() -> LedgerMetadata {
        let ensemble = ["192.0.2.1:3181", "192.0.2.2:3181", "192.0.2.3:3181"]
            .iter()
            .map(|s| BookieId::new(*s).unwrap())
            .collect();
        let mut m = LedgerMetadata::new_open(
            QuorumConfig::new(3, 2, 1).unwrap(),
            ensemble,
            DigestType::Crc32c,
            b"foobar".to_vec(),
        );
        m.ctime = Some(-1);
        m.c_token = 0;
        m
    }

    #[test]
    fn encodes_the_spec_test_vector_byte_for_byte() {
        assert_eq!(
            encode_ledger_metadata(&vector_metadata()).unwrap(),
            hex(VECTOR)
        );
    }

    #[test]
    fn decodes_the_spec_test_vector() {
        assert_eq!(
            decode_ledger_metadata(1, &hex(VECTOR)).unwrap(),
            vector_metadata()
        );
    }

    #[test]
    fn closed_ledger_with_custom_metadata_round_trips() {
        let mut m = vector_metadata();
        m.state = LedgerState::Closed;
        m.last_entry_id = 41;
        m.length = 4200;
        m.ensembles.insert(
            20,
            vec![
                BookieId::new("192.0.2.1:3181").unwrap(),
                BookieId::new("192.0.2.4:3181").unwrap(),
                BookieId::new("192.0.2.3:3181").unwrap(),
            ],
        );
        m.custom_metadata
            .insert("application".into(), b"pulsar".to_vec());
        m.ctime = None;
        m.c_token = 1234567;
        m.digest_type = DigestType::Mac;
        let bytes = encode_ledger_metadata(&m).unwrap();
        assert_eq!(decode_ledger_metadata(9, &bytes).unwrap(), m);
    }

    #[test]
    fn corrupt_records_are_errors_naming_the_ledger() {
        let good = hex(VECTOR);
        let mut cases: Vec<Vec<u8>> = vec![
            Vec::new(),
            b"garbage".to_vec(),
            b"BookieMetadataFormatVersion\t".to_vec(),
            b"BookieMetadataFormatVersion\tx\n".to_vec(),
            b"BookieMetadataFormatVersion\t2\nquorumSize: 2".to_vec(),
            b"BookieMetadataFormatVersion\t3\n".to_vec(),
            b"BookieMetadataFormatVersion\t99999999999999999999\n".to_vec(),
        ];
        // Every truncation of a good record.
        for cut in 0..good.len() {
            cases.push(good[..cut].to_vec());
        }
        // A body whose ensemble is smaller than the ensemble size.
        let m = vector_metadata();
        let mut bad = encode_ledger_metadata(&m).unwrap();
        // header, "3\n", the one-byte length, then 08 02 (write quorum), then 10 03.
        let at = METADATA_HEADER.len() + 2 + 1 + 2;
        assert_eq!(bad[at..at + 2], [0x10, 0x03]);
        bad[at + 1] = 4;
        cases.push(bad);
        for (i, case) in cases.iter().enumerate() {
            match decode_ledger_metadata(77, case) {
                Err(MetadataError::Corrupt { what, .. }) => {
                    assert_eq!(what, "metadata of ledger 77", "case {i}")
                }
                other => panic!("case {i} ({case:?}) decoded to {other:?}"),
            }
        }
    }

    #[test]
    fn mutated_records_never_panic() {
        let good = encode_ledger_metadata(&vector_metadata()).unwrap();
        let mut rng = fastrand::Rng::with_seed(0x5eed);
        for _ in 0..20_000 {
            let mut bytes = good.clone();
            for _ in 0..rng.usize(1..4) {
                let i = rng.usize(..bytes.len());
                match rng.u8(..3) {
                    0 => bytes[i] = rng.u8(..),
                    1 => {
                        bytes.remove(i);
                    }
                    _ => bytes.insert(i, rng.u8(..)),
                }
            }
            // Whatever the damage: a value or a Corrupt error naming the ledger.
            if let Err(e) = decode_ledger_metadata(5, &bytes) {
                assert!(
                    matches!(&e, MetadataError::Corrupt { what, .. } if what == "metadata of ledger 5"),
                    "{e}"
                );
            }
            let _ = decode_bookie_service_info(&BookieId::new("b:1").unwrap(), &bytes);
            let _ = decode_underreplicated(5, &bytes);
        }
    }

    #[test]
    fn refuses_to_encode_invalid_metadata() {
        let mut m = vector_metadata();
        m.ensembles.clear();
        assert!(matches!(
            encode_ledger_metadata(&m),
            Err(MetadataError::InvalidArgument(_))
        ));
        let mut m = vector_metadata();
        m.metadata_format_version = 2;
        assert!(matches!(
            encode_ledger_metadata(&m),
            Err(MetadataError::InvalidArgument(_))
        ));
    }

    #[test]
    fn bookie_service_info_round_trips_and_empty_is_empty() {
        let b = BookieId::new("10.0.0.1:3181").unwrap();
        assert!(encode_bookie_service_info(&BookieServiceInfo::default()).is_empty());
        assert_eq!(
            decode_bookie_service_info(&b, &[]).unwrap(),
            BookieServiceInfo::default()
        );
        let mut info = BookieServiceInfo::default();
        info.endpoints.push(Endpoint {
            id: "bookie".into(),
            host: "10.0.0.1".into(),
            port: 3181,
            protocol: "bookie-rpc".into(),
            auth: vec![],
            extensions: vec!["tls".into()],
        });
        info.properties.insert("rack".into(), "/r1".into());
        let bytes = encode_bookie_service_info(&info);
        // Endpoint is field 6, length-delimited: tag 0x32.
        assert_eq!(bytes[0], 0x32);
        assert_eq!(decode_bookie_service_info(&b, &bytes).unwrap(), info);
        assert!(decode_bookie_service_info(&b, b"\xff\xff").is_err());
    }

    #[test]
    fn underreplicated_mark_round_trips() {
        let missing: BTreeSet<_> =
            [BookieId::new("a:1").unwrap(), BookieId::new("b:2").unwrap()].into();
        let bytes = encode_underreplicated(&missing, Some(5));
        assert_eq!(
            decode_underreplicated(3, &bytes).unwrap(),
            (missing, Some(5))
        );
        assert!(decode_underreplicated(3, b"\x0a\x03a b").is_err());
    }
}
