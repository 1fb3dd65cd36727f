//! How entry payloads travel through text lines: as raw bytes (the default: one line of
//! stdin is one entry, the newline excluded), or as hex or base64 (standard alphabet,
//! padded) so that payloads holding newlines or any byte at all survive a round trip.

use anyhow::{bail, ensure};

/// The encoding of payloads on stdin and stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Encoding {
    #[default]
    Raw,
    Hex,
    Base64,
}

/// The `--hex` / `--base64` flags shared by the ledger commands.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct EncodingArgs {
    /// Payloads as hex (two digits a byte).
    #[arg(long, conflicts_with = "base64")]
    pub hex: bool,
    /// Payloads as base64 (standard alphabet, padded).
    #[arg(long)]
    pub base64: bool,
}

impl EncodingArgs {
    pub fn encoding(self) -> Encoding {
        if self.hex {
            Encoding::Hex
        } else if self.base64 {
            Encoding::Base64
        } else {
            Encoding::Raw
        }
    }
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

impl Encoding {
    /// Encodes a payload for output.
    pub fn encode(self, payload: &[u8]) -> Vec<u8> {
        match self {
            Encoding::Raw => payload.to_vec(),
            Encoding::Hex => {
                const H: &[u8; 16] = b"0123456789abcdef";
                payload
                    .iter()
                    .flat_map(|b| [H[(b >> 4) as usize], H[(b & 15) as usize]])
                    .collect()
            }
            Encoding::Base64 => {
                let mut out = Vec::with_capacity(payload.len().div_ceil(3) * 4);
                for chunk in payload.chunks(3) {
                    let n = chunk.len();
                    let v = (u32::from(chunk[0]) << 16)
                        | (u32::from(*chunk.get(1).unwrap_or(&0)) << 8)
                        | u32::from(*chunk.get(2).unwrap_or(&0));
                    for i in 0..4 {
                        if i <= n {
                            out.push(B64[((v >> (18 - 6 * i)) & 63) as usize]);
                        } else {
                            out.push(b'=');
                        }
                    }
                }
                out
            }
        }
    }

    /// Decodes one input line (without its newline) into a payload; the error names the
    /// problem.
    pub fn decode(self, line: &[u8]) -> anyhow::Result<Vec<u8>> {
        match self {
            Encoding::Raw => Ok(line.to_vec()),
            Encoding::Hex => {
                let line = trim_cr(line);
                ensure!(
                    line.len().is_multiple_of(2),
                    "invalid hex payload: odd number of digits ({})",
                    line.len()
                );
                line.chunks(2)
                    .map(|p| Ok((hex_digit(p[0])? << 4) | hex_digit(p[1])?))
                    .collect()
            }
            Encoding::Base64 => {
                let line = trim_cr(line);
                ensure!(
                    line.len().is_multiple_of(4),
                    "invalid base64 payload: length {} is not a multiple of 4",
                    line.len()
                );
                let mut out = Vec::with_capacity(line.len() / 4 * 3);
                let quads = line.len() / 4;
                for (q, chunk) in line.chunks(4).enumerate() {
                    let pad = chunk.iter().rev().take_while(|&&c| c == b'=').count();
                    ensure!(
                        pad <= 2 && (pad == 0 || q + 1 == quads),
                        "invalid base64 payload: misplaced padding"
                    );
                    let mut v = 0u32;
                    for &c in &chunk[..4 - pad] {
                        v = (v << 6) | b64_digit(c)?;
                    }
                    v <<= 6 * pad as u32;
                    let bytes = [(v >> 16) as u8, (v >> 8) as u8, v as u8];
                    out.extend_from_slice(&bytes[..3 - pad]);
                }
                Ok(out)
            }
        }
    }
}

/// Encoded text may come from a file written on Windows; a raw payload keeps every byte.
fn trim_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

fn hex_digit(c: u8) -> anyhow::Result<u8> {
    match c {
        b'0'..=b'9' => Ok(c - b'0'),
        b'a'..=b'f' => Ok(c - b'a' + 10),
        b'A'..=b'F' => Ok(c - b'A' + 10),
        _ => bail!("invalid hex payload: {:?} is not a hex digit", c as char),
    }
}

fn b64_digit(c: u8) -> anyhow::Result<u32> {
    match B64.iter().position(|&x| x == c) {
        Some(i) => Ok(i as u32),
        None => bail!(
            "invalid base64 payload: {:?} is not a base64 digit",
            c as char
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_length_and_byte() {
        for enc in [Encoding::Raw, Encoding::Hex, Encoding::Base64] {
            for len in 0..10 {
                let payload: Vec<u8> = (0..len).map(|i| (i * 97 + 200) as u8).collect();
                let text = enc.encode(&payload);
                assert_eq!(enc.decode(&text).unwrap(), payload, "{enc:?} {len}");
            }
        }
    }

    #[test]
    fn known_encodings() {
        assert_eq!(Encoding::Hex.encode(b"\x00\xffA"), b"00ff41");
        assert_eq!(Encoding::Base64.encode(b"foobar"), b"Zm9vYmFy");
        assert_eq!(Encoding::Base64.encode(b"fo"), b"Zm8=");
        assert_eq!(Encoding::Base64.decode(b"Zg==").unwrap(), b"f");
        assert_eq!(Encoding::Hex.decode(b"0A0b\r").unwrap(), b"\n\x0b");
    }

    #[test]
    fn bad_input_names_the_problem() {
        let e = Encoding::Hex.decode(b"abc").unwrap_err().to_string();
        assert!(e.contains("odd number"), "{e}");
        let e = Encoding::Hex.decode(b"zz").unwrap_err().to_string();
        assert!(e.contains("not a hex digit"), "{e}");
        let e = Encoding::Base64.decode(b"Zg=").unwrap_err().to_string();
        assert!(e.contains("multiple of 4"), "{e}");
        let e = Encoding::Base64
            .decode(b"Zg==Zg==")
            .unwrap_err()
            .to_string();
        assert!(e.contains("padding"), "{e}");
        let e = Encoding::Base64.decode(b"Z!==").unwrap_err().to_string();
        assert!(e.contains("not a base64 digit"), "{e}");
    }
}
