//! The cookie: a bookie's identity stamped into each of its directories, so that a
//! bookie never starts on the wrong disks (or a disk that was wiped or swapped).
//!
//! The format is BookKeeper's (Cookie.java, layout version 5, see
//! docs/formats/cookie.md): a first line with the layout version, then the protobuf text
//! format of `CookieFormat`. The same text is stored as `<dir>/current/VERSION` in every
//! journal, ledger and index directory, and (by the metadata layer, not here) under
//! `/ledgers/cookies/<bookieId>`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use folio_env::FileSystem;

/// The cookie layout version written (BookKeeper's current one).
pub const COOKIE_LAYOUT_VERSION: u32 = 5;
/// The oldest layout version with the text format (4 and 5 share it).
const OLDEST_TEXT_LAYOUT: u32 = 4;
/// The cookie's file name inside `<dir>/current/`.
pub const VERSION_FILE: &str = "VERSION";

/// A bookie's cookie.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cookie {
    /// The bookie id (`host:port` or a custom id).
    pub bookie_host: String,
    /// Journal directories; stored joined with `,`.
    pub journal_dirs: Vec<String>,
    /// Ledger directories; stored as the count then each directory, tab separated.
    pub ledger_dirs: Vec<String>,
    /// The cluster's instance id (content of `/ledgers/INSTANCEID`).
    pub instance_id: Option<String>,
    /// Index directories, if configured apart from the ledger directories.
    pub index_dirs: Option<Vec<String>>,
}

/// A cookie that cannot be parsed; says what and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad cookie: {0}")]
pub struct CookieParseError(pub String);

/// Reading or writing a cookie file failed.
#[derive(Debug, thiserror::Error)]
pub enum CookieError {
    #[error("cookie file {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cookie file {}: {source}", path.display())]
    Parse {
        path: PathBuf,
        #[source]
        source: CookieParseError,
    },
}

/// A cookie that does not match the expected one: names the field and both values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cookie mismatch in field {field}: expected {expected:?}, found {found:?}")]
pub struct CookieMismatch {
    /// The field's name in the cookie text (`bookieHost`, `journalDir`, ...).
    pub field: &'static str,
    pub expected: String,
    pub found: String,
}

fn encode_dirs(dirs: &[String]) -> String {
    let mut s = dirs.len().to_string();
    for d in dirs {
        s.push('\t');
        s.push_str(d);
    }
    s
}

fn decode_dirs(field: &str, s: &str) -> Result<Vec<String>, CookieParseError> {
    let mut parts = s.split('\t');
    let count = parts.next().unwrap_or_default();
    let count: usize = count.parse().map_err(|_| {
        CookieParseError(format!(
            "{field} must start with a directory count, found {count:?}"
        ))
    })?;
    let dirs: Vec<String> = parts.map(str::to_owned).collect();
    if dirs.len() != count {
        return Err(CookieParseError(format!(
            "{field} says {count} directories but lists {}",
            dirs.len()
        )));
    }
    Ok(dirs)
}

/// Protobuf text-format string escaping (as protobuf-java's `TextFormat.escapeBytes`):
/// only printable ASCII stays as is.
fn escape(s: &str, out: &mut String) {
    for &b in s.as_bytes() {
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
                let _ = write!(out, "\\{b:03o}");
            }
        }
    }
}

/// Reads one quoted text-format string starting at `s[0]` (a `"` or `'`); returns the
/// unescaped value and the rest of the input.
fn unquote(s: &str) -> Result<(String, &str), CookieParseError> {
    let bytes = s.as_bytes();
    let quote = bytes[0];
    let mut out = Vec::new();
    let mut i = 1;
    while i < bytes.len() {
        let b = bytes[i];
        i += 1;
        if b == quote {
            let value = String::from_utf8(out)
                .map_err(|_| CookieParseError("string is not valid UTF-8".into()))?;
            return Ok((value, &s[i..]));
        }
        if b == b'\n' {
            break;
        }
        if b != b'\\' {
            out.push(b);
            continue;
        }
        let Some(&c) = bytes.get(i) else { break };
        i += 1;
        let simple = match c {
            b'a' => Some(0x07),
            b'b' => Some(0x08),
            b'f' => Some(0x0c),
            b'n' => Some(b'\n'),
            b'r' => Some(b'\r'),
            b't' => Some(b'\t'),
            b'v' => Some(0x0b),
            b'\\' | b'\'' | b'"' | b'?' => Some(c),
            _ => None,
        };
        if let Some(v) = simple {
            out.push(v);
        } else if c.is_ascii_digit() && c < b'8' {
            let mut v = u32::from(c - b'0');
            for _ in 0..2 {
                match bytes.get(i) {
                    Some(&d @ b'0'..=b'7') => {
                        v = v * 8 + u32::from(d - b'0');
                        i += 1;
                    }
                    _ => break,
                }
            }
            out.push(
                u8::try_from(v)
                    .map_err(|_| CookieParseError(format!("octal escape \\{v:o} too large")))?,
            );
        } else if c == b'x' {
            let hex: String = bytes[i..]
                .iter()
                .take(2)
                .take_while(|d| d.is_ascii_hexdigit())
                .map(|&d| d as char)
                .collect();
            if hex.is_empty() {
                return Err(CookieParseError("\\x escape without hex digits".into()));
            }
            i += hex.len();
            out.push(u8::from_str_radix(&hex, 16).expect("hex digits"));
        } else {
            return Err(CookieParseError(format!("unknown escape \\{}", c as char)));
        }
    }
    Err(CookieParseError("unterminated string".into()))
}

impl Cookie {
    /// The cookie text (layout version 5), as BookKeeper writes it.
    pub fn to_text(&self) -> String {
        let mut s = format!("{COOKIE_LAYOUT_VERSION}\n");
        let mut field = |name: &str, value: &str| {
            s.push_str(name);
            s.push_str(": \"");
            escape(value, &mut s);
            s.push_str("\"\n");
        };
        field("bookieHost", &self.bookie_host);
        field("journalDir", &self.journal_dirs.join(","));
        field("ledgerDirs", &encode_dirs(&self.ledger_dirs));
        if let Some(id) = &self.instance_id {
            field("instanceId", id);
        }
        if let Some(dirs) = &self.index_dirs {
            field("indexDirs", &encode_dirs(dirs));
        }
        s
    }

    /// The cookie as the bytes of a `VERSION` file.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.to_text().into_bytes()
    }

    /// Parses a cookie of layout version 4 or 5.
    pub fn parse(bytes: &[u8]) -> Result<Cookie, CookieParseError> {
        let text = std::str::from_utf8(bytes)
            .map_err(|_| CookieParseError("cookie is not valid UTF-8".into()))?;
        let (first, mut rest) = text.split_once('\n').unwrap_or((text, ""));
        let version: u32 = first.trim().parse().map_err(|_| {
            CookieParseError(format!(
                "first line must be the layout version, found {first:?}"
            ))
        })?;
        if !(OLDEST_TEXT_LAYOUT..=COOKIE_LAYOUT_VERSION).contains(&version) {
            return Err(CookieParseError(format!(
                "cookie layout version {version} unsupported (this build reads {OLDEST_TEXT_LAYOUT} to {COOKIE_LAYOUT_VERSION})"
            )));
        }
        let (mut host, mut journal, mut ledgers, mut instance, mut index) =
            (None, None, None, None, None);
        loop {
            rest = rest.trim_start();
            if rest.is_empty() {
                break;
            }
            let name_len = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(rest.len());
            let name = &rest[..name_len];
            rest = rest[name_len..].trim_start();
            rest = rest.strip_prefix(':').ok_or_else(|| {
                CookieParseError(format!("expected ':' after field name {name:?}"))
            })?;
            rest = rest.trim_start();
            if !rest.starts_with(['"', '\'']) {
                return Err(CookieParseError(format!(
                    "field {name:?}: expected a quoted string"
                )));
            }
            let (value, after) =
                unquote(rest).map_err(|e| CookieParseError(format!("field {name:?}: {}", e.0)))?;
            rest = after;
            let slot = match name {
                "bookieHost" => &mut host,
                "journalDir" => &mut journal,
                "ledgerDirs" => &mut ledgers,
                "instanceId" => &mut instance,
                "indexDirs" => &mut index,
                other => return Err(CookieParseError(format!("unknown field {other:?}"))),
            };
            if slot.replace(value).is_some() {
                return Err(CookieParseError(format!("field {name:?} appears twice")));
            }
        }
        let required = |v: Option<String>, name: &str| {
            v.ok_or_else(|| CookieParseError(format!("required field {name} is missing")))
        };
        let host = required(host, "bookieHost")?;
        let journal = required(journal, "journalDir")?;
        let ledgers = required(ledgers, "ledgerDirs")?;
        Ok(Cookie {
            bookie_host: host,
            journal_dirs: journal.split(',').map(str::to_owned).collect(),
            ledger_dirs: decode_dirs("ledgerDirs", &ledgers)?,
            instance_id: instance,
            index_dirs: index.map(|s| decode_dirs("indexDirs", &s)).transpose()?,
        })
    }

    /// Checks this (stored) cookie against the `expected` one (built from the current
    /// configuration): bookie id, journal, ledger and index directories (index defaulting
    /// to ledger directories) and instance id must all be equal.
    pub fn verify(&self, expected: &Cookie) -> Result<(), CookieMismatch> {
        let check = |field: &'static str, expected: String, found: String| {
            if expected == found {
                Ok(())
            } else {
                Err(CookieMismatch {
                    field,
                    expected,
                    found,
                })
            }
        };
        check(
            "bookieHost",
            expected.bookie_host.clone(),
            self.bookie_host.clone(),
        )?;
        check(
            "journalDir",
            expected.journal_dirs.join(","),
            self.journal_dirs.join(","),
        )?;
        check(
            "ledgerDirs",
            encode_dirs(&expected.ledger_dirs),
            encode_dirs(&self.ledger_dirs),
        )?;
        let opt = |v: &Option<String>| v.clone().unwrap_or_else(|| "<none>".into());
        check(
            "instanceId",
            opt(&expected.instance_id),
            opt(&self.instance_id),
        )?;
        let index = |c: &Cookie| encode_dirs(c.index_dirs.as_ref().unwrap_or(&c.ledger_dirs));
        check("indexDirs", index(expected), index(self))
    }

    /// The path of the cookie file of directory `dir`.
    pub fn path_in(dir: &Path) -> PathBuf {
        dir.join("current").join(VERSION_FILE)
    }

    /// Writes the cookie to `<dir>/current/VERSION` atomically (temporary file, sync,
    /// rename, directory sync), creating `current/` if needed.
    pub fn write_to_dir(&self, fs: &dyn FileSystem, dir: &Path) -> Result<(), CookieError> {
        let path = Self::path_in(dir);
        let io = |source| CookieError::Io {
            path: path.clone(),
            source,
        };
        fs.create_dir_all(&dir.join("current")).map_err(io)?;
        fs.write_file_atomic(&path, &self.to_bytes()).map_err(io)
    }

    /// Reads `<dir>/current/VERSION`: `Ok(None)` if there is none (a new directory).
    pub fn read_from_dir(fs: &dyn FileSystem, dir: &Path) -> Result<Option<Cookie>, CookieError> {
        let path = Self::path_in(dir);
        if !fs.exists(&path) {
            return Ok(None);
        }
        let bytes = fs.read_file(&path).map_err(|source| CookieError::Io {
            path: path.clone(),
            source,
        })?;
        Cookie::parse(&bytes)
            .map(Some)
            .map_err(|source| CookieError::Parse { path, source })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use folio_env::RealFileSystem;

    fn sample() -> Cookie {
        Cookie {
            bookie_host: "10.0.0.1:3181".into(),
            journal_dirs: vec!["/data/journal".into()],
            ledger_dirs: vec!["/data/ledgers".into()],
            instance_id: Some("5d1f2a3c-0000-4000-8000-000000000001".into()),
            index_dirs: None,
        }
    }

    #[test]
    fn exact_text_matches_bookkeeper_layout_5() {
        assert_eq!(
            sample().to_text(),
            "5\nbookieHost: \"10.0.0.1:3181\"\njournalDir: \"/data/journal\"\n\
             ledgerDirs: \"1\\t/data/ledgers\"\ninstanceId: \"5d1f2a3c-0000-4000-8000-000000000001\"\n"
        );
        let mut c = sample();
        c.instance_id = None;
        c.journal_dirs = vec!["/j1".into(), "/j2".into()];
        c.ledger_dirs = vec!["/l1".into(), "/l2".into()];
        c.index_dirs = Some(vec!["/i".into()]);
        assert_eq!(
            c.to_text(),
            "5\nbookieHost: \"10.0.0.1:3181\"\njournalDir: \"/j1,/j2\"\n\
             ledgerDirs: \"2\\t/l1\\t/l2\"\nindexDirs: \"1\\t/i\"\n"
        );
    }

    #[test]
    fn round_trip_including_escapes() {
        let mut c = sample();
        c.ledger_dirs = vec!["/a \"quoted\" \\ dir".into(), "/caf\u{e9}\n".into()];
        c.index_dirs = Some(vec!["/idx".into()]);
        let text = c.to_text();
        assert!(
            text.contains("\\303\\251"),
            "non-ASCII is octal-escaped: {text}"
        );
        assert_eq!(Cookie::parse(text.as_bytes()).unwrap(), c);
        assert_eq!(Cookie::parse(&sample().to_bytes()).unwrap(), sample());
    }

    #[test]
    fn parses_layout_4_and_lenient_whitespace() {
        let text = "4\n  bookieHost:'h:1'  journalDir : \"/j\"\nledgerDirs: \"1\\x09/l\"\n";
        let c = Cookie::parse(text.as_bytes()).unwrap();
        assert_eq!(c.bookie_host, "h:1");
        assert_eq!(c.ledger_dirs, vec!["/l".to_string()]);
        assert_eq!(c.instance_id, None);
    }

    #[test]
    fn parse_errors_say_what_is_wrong() {
        let cases: &[(&str, &str)] = &[
            ("", "layout version"),
            ("x\n", "layout version"),
            ("3\nh\n/j\n1\t/l\n", "layout version 3 unsupported"),
            ("5\nbookieHost: \"h\"\n", "journalDir is missing"),
            ("5\nbookieHost \"h\"\n", "expected ':'"),
            ("5\nbookieHost: h\n", "quoted string"),
            ("5\nbookieHost: \"h\n", "unterminated"),
            ("5\nbookieHost: \"\\q\"\n", "unknown escape"),
            ("5\nbogus: \"h\"\n", "unknown field"),
            ("5\nbookieHost: \"a\"\nbookieHost: \"b\"\n", "twice"),
            (
                "5\nbookieHost: \"h\"\njournalDir: \"/j\"\nledgerDirs: \"2\\t/l\"\n",
                "says 2 directories but lists 1",
            ),
            (
                "5\nbookieHost: \"h\"\njournalDir: \"/j\"\nledgerDirs: \"/l\"\n",
                "directory count",
            ),
        ];
        for (text, want) in cases {
            let e = Cookie::parse(text.as_bytes()).unwrap_err();
            assert!(e.to_string().contains(want), "{text:?}: {e}");
        }
        assert!(Cookie::parse(&[0xff, b'\n']).is_err());
    }

    #[test]
    fn verify_names_the_differing_field_and_both_values() {
        let expected = sample();
        assert_eq!(sample().verify(&expected), Ok(()));
        let mut found = sample();
        found.journal_dirs = vec!["/other".into()];
        let m = found.verify(&expected).unwrap_err();
        assert_eq!(m.field, "journalDir");
        assert_eq!(
            m.to_string(),
            "cookie mismatch in field journalDir: expected \"/data/journal\", found \"/other\""
        );
        let mut found = sample();
        found.instance_id = None;
        let m = found.verify(&expected).unwrap_err();
        assert_eq!((m.field, m.found.as_str()), ("instanceId", "<none>"));
        let mut found = sample();
        found.bookie_host = "other:3181".into();
        assert_eq!(found.verify(&expected).unwrap_err().field, "bookieHost");
        let mut found = sample();
        found.ledger_dirs.push("/more".into());
        assert_eq!(found.verify(&expected).unwrap_err().field, "ledgerDirs");
        // Index dirs default to the ledger dirs on both sides.
        let mut found = sample();
        found.index_dirs = Some(expected.ledger_dirs.clone());
        assert_eq!(found.verify(&expected), Ok(()));
        found.index_dirs = Some(vec!["/idx".into()]);
        let m = found.verify(&expected).unwrap_err();
        assert_eq!(m.field, "indexDirs");
        assert_eq!(m.expected, "1\t/data/ledgers");
    }

    #[test]
    fn write_and_read_the_version_file() {
        let d = tempfile::tempdir().unwrap();
        let fs = RealFileSystem;
        assert!(Cookie::read_from_dir(&fs, d.path()).unwrap().is_none());
        sample().write_to_dir(&fs, d.path()).unwrap();
        let mut c2 = sample();
        c2.bookie_host = "h2:1".into();
        c2.write_to_dir(&fs, d.path()).unwrap();
        assert_eq!(Cookie::read_from_dir(&fs, d.path()).unwrap(), Some(c2));
        assert_eq!(
            fs.list_dir(&d.path().join("current")).unwrap(),
            vec!["VERSION"],
            "no temporary file left behind"
        );
        fs.write_file_atomic(&Cookie::path_in(d.path()), b"5\nbogus: \"x\"\n")
            .unwrap();
        let e = Cookie::read_from_dir(&fs, d.path()).unwrap_err();
        assert!(e.to_string().contains("current/VERSION"), "{e}");
        assert!(e.to_string().contains("unknown field"), "{e}");
    }
}
