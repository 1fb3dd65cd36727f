//! Protobuf *text format* for the small records BookKeeper keeps under `underreplication/`
//! (spec §5.8), shared by the zk:// and etcd:// drivers so a mark reads the same on both: `UnderreplicatedLedgerFormat`, `LockDataFormat`, `AuditorVoteFormat` and
//! `LedgerRereplicationLayoutFormat`. Java writes them with `TextFormat.printToString`: one
//! `name: value` per line, strings double-quoted with C-style escapes.
//!
//! Only scalar fields (strings and integers) occur in these messages, so a field list is all
//! this needs: [`print`] writes one, [`parse`] reads one back (in order, repeats kept).

use std::fmt::Write as _;

use std::collections::BTreeSet;

use folio_types::{BookieId, LedgerId};

use crate::{MetadataError, Result, UnderreplicatedLedger};

/// The text record of an under-replication mark (`UnderreplicatedLedgerFormat`): one
/// `replica` per missing bookie, then `ctime` in ms. Both zk:// and etcd:// store this.
pub fn encode_underreplicated(replicas: &BTreeSet<BookieId>, ctime: Option<i64>) -> Vec<u8> {
    let mut fields: Vec<(&str, Value)> = replicas
        .iter()
        .map(|b| ("replica", Value::Str(b.to_string())))
        .collect();
    if let Some(c) = ctime {
        fields.push(("ctime", Value::Int(c)));
    }
    print(&fields).into_bytes()
}

/// Reads [`encode_underreplicated`]'s record; errors name the ledger.
pub fn decode_underreplicated(ledger: LedgerId, data: &[u8]) -> Result<UnderreplicatedLedger> {
    let what = crate::driver::underreplicated_what(ledger);
    let corrupt = |reason: String| MetadataError::corrupt(&what, reason);
    let s = std::str::from_utf8(data).map_err(|_| corrupt("not valid UTF-8".into()))?;
    let fields = parse(s).map_err(corrupt)?;
    let mut missing = BTreeSet::new();
    for r in strings(&fields, "replica") {
        missing.insert(BookieId::new(r).map_err(|e| corrupt(e.to_string()))?);
    }
    Ok(UnderreplicatedLedger {
        ledger_id: ledger,
        missing_replicas: missing,
        ctime: int(&fields, "ctime"),
    })
}

/// The text record of an under-replication lock (`LockDataFormat`) or an Auditor vote
/// (`AuditorVoteFormat`): both are `{1: optional string bookieId}`, so `bookieId: "<id>"`.
pub fn encode_bookie_id(bookie: &str) -> Vec<u8> {
    print(&[("bookieId", Value::Str(bookie.to_string()))]).into_bytes()
}

/// Reads [`encode_bookie_id`]'s record; `what` names the record in errors.
pub fn decode_bookie_id(what: &str, data: &[u8]) -> Result<BookieId> {
    let corrupt = |reason: String| MetadataError::corrupt(what, reason);
    let s = std::str::from_utf8(data).map_err(|_| corrupt("not valid UTF-8".into()))?;
    let fields = parse(s).map_err(corrupt)?;
    let id = strings(&fields, "bookieId")
        .first()
        .copied()
        .ok_or_else(|| corrupt("no bookieId".into()))?;
    BookieId::new(id).map_err(|e| corrupt(e.to_string()))
}

/// The holder named in a lock record ([`encode_bookie_id`]'s layout; BookKeeper writes the
/// worker's host name there, not necessarily a bookie id).
pub fn decode_lock_holder(what: &str, data: &[u8]) -> Result<String> {
    let corrupt = |reason: String| MetadataError::corrupt(what, reason);
    let s = std::str::from_utf8(data).map_err(|_| corrupt("not valid UTF-8".into()))?;
    let fields = parse(s).map_err(corrupt)?;
    strings(&fields, "bookieId")
        .first()
        .map(|h| h.to_string())
        .ok_or_else(|| corrupt("no bookieId".into()))
}

/// A scalar field value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Str(String),
    Int(i64),
}

/// Prints fields as Java's `TextFormat.printToString` does.
pub fn print(fields: &[(&str, Value)]) -> String {
    let mut out = String::new();
    for (name, value) in fields {
        match value {
            Value::Str(s) => {
                let _ = writeln!(out, "{name}: \"{}\"", escape(s.as_bytes()));
            }
            Value::Int(i) => {
                let _ = writeln!(out, "{name}: {i}");
            }
        }
    }
    out
}

/// Escapes bytes as protobuf's text format does (`TextFormat.escapeBytes`).
fn escape(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        match b {
            0x07 => out.push_str("\\a"),
            0x08 => out.push_str("\\b"),
            0x0c => out.push_str("\\f"),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x0b => out.push_str("\\v"),
            b'\\' => out.push_str("\\\\"),
            b'\'' => out.push_str("\\'"),
            b'"' => out.push_str("\\\""),
            0x20..=0x7e => out.push(b as char),
            _ => {
                let _ = write!(out, "\\{:03o}", b);
            }
        }
    }
    out
}

/// Parses text-format fields. Errors name the offending position.
pub fn parse(text: &str) -> Result<Vec<(String, Value)>, String> {
    let b = text.as_bytes();
    let mut i = 0;
    let mut out = Vec::new();
    let skip_ws = |i: &mut usize| {
        while *i < b.len() && (b[*i].is_ascii_whitespace() || b[*i] == b',' || b[*i] == b';') {
            *i += 1;
        }
    };
    loop {
        skip_ws(&mut i);
        if i >= b.len() {
            return Ok(out);
        }
        let start = i;
        while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
            i += 1;
        }
        if start == i {
            return Err(format!("expected a field name at byte {start}"));
        }
        let name = text[start..i].to_string();
        skip_ws(&mut i);
        if i >= b.len() || b[i] != b':' {
            return Err(format!("expected ':' after field {name:?}"));
        }
        i += 1;
        skip_ws(&mut i);
        if i < b.len() && (b[i] == b'"' || b[i] == b'\'') {
            // Adjacent quoted strings concatenate, as in the protobuf tokenizer.
            let mut bytes = Vec::new();
            while i < b.len() && (b[i] == b'"' || b[i] == b'\'') {
                i = parse_quoted(b, i, &mut bytes).map_err(|e| format!("field {name:?}: {e}"))?;
                while i < b.len() && b[i] == b' ' {
                    i += 1;
                }
            }
            let s = String::from_utf8(bytes)
                .map_err(|_| format!("field {name:?} is not valid UTF-8"))?;
            out.push((name, Value::Str(s)));
        } else {
            let vstart = i;
            while i < b.len() && (b[i] == b'-' || b[i].is_ascii_alphanumeric()) {
                i += 1;
            }
            let raw = &text[vstart..i];
            let v: i64 = raw
                .parse()
                .map_err(|_| format!("field {name:?}: {raw:?} is not an integer"))?;
            out.push((name, Value::Int(v)));
        }
    }
}

/// Parses one quoted string starting at `b[i]`; returns the index after the closing quote.
fn parse_quoted(b: &[u8], mut i: usize, out: &mut Vec<u8>) -> Result<usize, String> {
    let quote = b[i];
    i += 1;
    while i < b.len() {
        let c = b[i];
        if c == quote {
            return Ok(i + 1);
        }
        if c == b'\n' {
            break;
        }
        if c != b'\\' {
            out.push(c);
            i += 1;
            continue;
        }
        i += 1;
        let Some(&e) = b.get(i) else { break };
        i += 1;
        match e {
            b'a' => out.push(0x07),
            b'b' => out.push(0x08),
            b'f' => out.push(0x0c),
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'v' => out.push(0x0b),
            b'\\' | b'\'' | b'"' | b'?' => out.push(e),
            b'0'..=b'7' => {
                let mut v = (e - b'0') as u32;
                for _ in 0..2 {
                    match b.get(i) {
                        Some(&d @ b'0'..=b'7') => {
                            v = v * 8 + (d - b'0') as u32;
                            i += 1;
                        }
                        _ => break,
                    }
                }
                out.push(v as u8);
            }
            b'x' => {
                let mut v = 0u32;
                let mut n = 0;
                while n < 2 {
                    match b.get(i).and_then(|d| (*d as char).to_digit(16)) {
                        Some(d) => {
                            v = v * 16 + d;
                            i += 1;
                            n += 1;
                        }
                        None => break,
                    }
                }
                if n == 0 {
                    return Err("\\x without hex digits".into());
                }
                out.push(v as u8);
            }
            other => return Err(format!("unknown escape \\{}", other as char)),
        }
    }
    Err("unterminated string".into())
}

/// The string fields called `name`, in order.
pub fn strings<'a>(fields: &'a [(String, Value)], name: &str) -> Vec<&'a str> {
    fields
        .iter()
        .filter(|(n, _)| n == name)
        .filter_map(|(_, v)| match v {
            Value::Str(s) => Some(s.as_str()),
            Value::Int(_) => None,
        })
        .collect()
}

/// The last integer field called `name`, if any.
pub fn int(fields: &[(String, Value)], name: &str) -> Option<i64> {
    fields.iter().rev().find_map(|(n, v)| match v {
        Value::Int(i) if n == name => Some(*i),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_like_java_textformat() {
        let t = print(&[
            ("replica", Value::Str("10.0.0.1:3181".into())),
            ("replica", Value::Str("10.0.0.2:3181".into())),
            ("ctime", Value::Int(1700000000000)),
        ]);
        assert_eq!(
            t,
            "replica: \"10.0.0.1:3181\"\nreplica: \"10.0.0.2:3181\"\nctime: 1700000000000\n"
        );
        assert_eq!(
            print(&[("ledgerDirs", Value::Str("1\t/data\"x\"\u{1}".into()))]),
            "ledgerDirs: \"1\\t/data\\\"x\\\"\\001\"\n"
        );
    }

    #[test]
    fn parses_what_it_prints_and_java_variants() {
        let fields = vec![
            ("bookieId", Value::Str("a\tb\"c\\d\u{7f}é".into())),
            ("version", Value::Int(-1)),
        ];
        let text = print(&fields);
        let back = parse(&text).unwrap();
        assert_eq!(strings(&back, "bookieId"), vec!["a\tb\"c\\d\u{7f}é"]);
        assert_eq!(int(&back, "version"), Some(-1));
        // Single-line (short debug) form and single quotes.
        let back = parse("type: 'BASIC' version: 1").unwrap();
        assert_eq!(strings(&back, "type"), vec!["BASIC"]);
        assert_eq!(int(&back, "version"), Some(1));
    }

    #[test]
    fn bookie_id_records_round_trip_and_name_the_record() {
        assert_eq!(encode_bookie_id("h:1"), b"bookieId: \"h:1\"\n");
        assert_eq!(
            decode_bookie_id("vote", &encode_bookie_id("h:1")).unwrap(),
            BookieId::new("h:1").unwrap()
        );
        for bad in [&b"nothing: 1"[..], b"bookieId: \"x", b"\xff"] {
            let e = decode_bookie_id("Auditor vote V_7", bad).unwrap_err();
            assert!(e.to_string().contains("Auditor vote V_7"), "{e}");
        }
    }

    #[test]
    fn rejects_garbage_with_a_reason() {
        assert!(parse("replica \"x\"").unwrap_err().contains("':'"));
        assert!(parse("replica: \"x").unwrap_err().contains("unterminated"));
        assert!(parse("ctime: abc").unwrap_err().contains("not an integer"));
        assert!(parse("\u{0}").is_err());
    }
}
