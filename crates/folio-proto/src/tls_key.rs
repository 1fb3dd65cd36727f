//! A TLS private key from its PEM text, as BookKeeper's PEM key stores take it (feature
//! `tls-keys`): PKCS#8, PKCS#1 or SEC1 in the clear, or an encrypted PKCS#8 key (`ENCRYPTED
//! PRIVATE KEY`, PBES2: PBKDF2 or scrypt with AES-CBC, what `openssl pkcs8 -topk8 -v2
//! aes-256-cbc` writes) decrypted with a password. The bookie (`tlsKeyStorePasswordPath`) and
//! the client (`--tls-key-password-file`) both decode keys here, so they accept the same files
//! and say the same things about them; each reads its own files and names its own setting.
//!
//! The password is a file's content (UTF-8); if that does not decrypt the key, the content
//! without its trailing line ending is tried too (a file written by `echo`). OpenSSL's older
//! "traditional" encryption (`Proc-Type: 4,ENCRYPTED`) is refused with the command that
//! converts it.

use std::path::Path;

use pkcs8::EncryptedPrivateKeyInfo;
use pkcs8::der::Decode;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

/// The PEM label of an encrypted PKCS#8 key.
pub const ENCRYPTED_LABEL: &str = "ENCRYPTED PRIVATE KEY";

/// How messages name the key and its password: the key file, the password file (if one was
/// given) and the setting that names the password file.
#[derive(Debug, Clone, Copy)]
pub struct KeyNames<'a> {
    pub key: &'a Path,
    pub password: Option<&'a Path>,
    pub password_setting: &'a str,
}

/// A decoded key, and whether a password was given for a key that is not encrypted (the
/// caller warns: the setting is probably meant for another file).
#[derive(Debug)]
pub struct DecodedKey {
    pub key: PrivateKeyDer<'static>,
    pub password_unused: bool,
}

/// The private key in `pem` (the content of `names.key`), decrypted with the content of the
/// password file `names.password` when one is given, read with `read` (the caller's file
/// access: this crate does no I/O of its own). Errors are whole sentences naming the key
/// file, the password file and the setting.
pub fn decode_private_key(
    pem: &[u8],
    names: KeyNames<'_>,
    read: impl FnOnce(&Path) -> std::io::Result<Vec<u8>>,
) -> Result<DecodedKey, String> {
    let setting = names.password_setting;
    let secret = match names.password {
        Some(p) => Some(read(p).map_err(|e| {
            format!(
                "cannot read the key password file ({setting}) {}: {e}",
                p.display()
            )
        })?),
        None => None,
    };
    let password = secret.as_deref();
    let text = String::from_utf8_lossy(pem);
    let key = names.key.display();
    if text.contains("Proc-Type: 4,ENCRYPTED") {
        return Err(format!(
            "the private key {key} is encrypted the traditional OpenSSL way, which Folio does \
             not read: convert it to an encrypted PKCS#8 key (openssl pkcs8 -topk8 -v2 \
             aes-256-cbc)"
        ));
    }
    let Some(der) = encrypted_block(&text, &key.to_string())? else {
        let plain = PrivateKeyDer::from_pem_slice(pem).map_err(|e| {
            format!(
                "no usable private key in {key} ({e}); an encrypted key needs {setting} and \
                 must be PKCS#8 (ENCRYPTED PRIVATE KEY)"
            )
        })?;
        return Ok(DecodedKey {
            key: plain,
            password_unused: password.is_some(),
        });
    };
    let Some(secret) = password else {
        return Err(format!(
            "the private key {key} is encrypted: set {setting} to the file holding its password"
        ));
    };
    let doc = decrypt(&der, secret).map_err(|why| {
        format!(
            "cannot decrypt the private key {key} with the password in {} ({setting}): {why}",
            names
                .password
                .map_or("the password file".into(), |p| p.display().to_string())
        )
    })?;
    Ok(DecodedKey {
        key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(doc)),
        password_unused: false,
    })
}

/// The DER of the text's `ENCRYPTED PRIVATE KEY` block, if it has one.
fn encrypted_block(text: &str, key: &str) -> Result<Option<Vec<u8>>, String> {
    let begin = format!("-----BEGIN {ENCRYPTED_LABEL}-----");
    let end = format!("-----END {ENCRYPTED_LABEL}-----");
    let Some(start) = text.find(&begin) else {
        return Ok(None);
    };
    let Some(stop) = text[start..].find(&end) else {
        return Err(format!("the private key {key} has no {end} line"));
    };
    let block = &text[start..start + stop + end.len()];
    let (label, der) = pkcs8::der::pem::decode_vec(block.as_bytes())
        .map_err(|e| format!("invalid PEM in the private key {key}: {e}"))?;
    debug_assert_eq!(label, ENCRYPTED_LABEL);
    Ok(Some(der))
}

/// The PKCS#8 DER inside `der` (an `EncryptedPrivateKeyInfo`), with `secret` or, failing
/// that, `secret` without its trailing line ending.
fn decrypt(der: &[u8], secret: &[u8]) -> Result<Vec<u8>, String> {
    let info = EncryptedPrivateKeyInfo::from_der(der)
        .map_err(|e| format!("not an encrypted PKCS#8 key: {e}"))?;
    let trimmed = secret
        .strip_suffix(b"\n")
        .map(|s| s.strip_suffix(b"\r").unwrap_or(s));
    let mut last = String::new();
    for candidate in std::iter::once(secret).chain(trimmed) {
        match info.decrypt(candidate) {
            // A wrong password can, rarely, pass the padding check: the result must parse.
            Ok(doc) if pkcs8::PrivateKeyInfo::from_der(doc.as_bytes()).is_ok() => {
                return Ok(doc.as_bytes().to_vec());
            }
            Ok(_) => last = "wrong password".into(),
            // A bad padding after decryption (pkcs5 0.7 reports it as EncryptFailed).
            Err(pkcs8::Error::EncryptedPrivateKey(
                pkcs8::pkcs5::Error::DecryptFailed | pkcs8::pkcs5::Error::EncryptFailed,
            )) => last = "wrong password".into(),
            // Or it passed the padding check and the bytes are not DER at all (`decrypt`
            // parses them; the encrypted structure itself was parsed above): about one
            // wrong password in 256 (a client TLS test met it).
            Err(pkcs8::Error::Asn1(_)) => last = "wrong password".into(),
            Err(e) => return Err(e.to_string()),
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pkcs8::pkcs5::pbes2;

    /// A key encrypted with `password` (PBKDF2-SHA256, AES-256-CBC) as PEM, and its plain
    /// PKCS#8 DER. The plain key is a fixed Ed25519 PKCS#8 document, so no key generator is
    /// needed here.
    fn encrypted_key(password: &[u8]) -> (String, Vec<u8>) {
        encrypted_key_with(password, 2048)
    }

    /// [`encrypted_key`] with `rounds` of PBKDF2.
    fn encrypted_key_with(password: &[u8], rounds: u32) -> (String, Vec<u8>) {
        // RFC 8410 section 10.3's example private key.
        let plain: Vec<u8> = [
            0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22,
            0x04, 0x20, 0xd4, 0xee, 0x72, 0xdb, 0xf9, 0x13, 0x84, 0xca, 0x1d, 0x5d, 0x53, 0x2a,
            0x3e, 0x3d, 0x9b, 0x5e, 0x0f, 0x70, 0x7f, 0x16, 0xed, 0x27, 0x4b, 0xd3, 0x2d, 0xcb,
            0x72, 0x8e, 0x4f, 0x24, 0x8d, 0x51,
        ]
        .to_vec();
        let params =
            pbes2::Parameters::pbkdf2_sha256_aes256cbc(rounds, b"salt-for-test", &[7u8; 16])
                .unwrap();
        let info = pkcs8::PrivateKeyInfo::from_der(&plain).unwrap();
        let enc = info.encrypt_with_params(params, password).unwrap();
        let pem = pkcs8::der::pem::encode_string(
            ENCRYPTED_LABEL,
            pkcs8::der::pem::LineEnding::LF,
            enc.as_bytes(),
        )
        .unwrap();
        (pem, plain)
    }

    fn names() -> KeyNames<'static> {
        KeyNames {
            key: Path::new("/k.pem"),
            password: Some(Path::new("/pw")),
            password_setting: "thePasswordSetting",
        }
    }

    fn names_without_password() -> KeyNames<'static> {
        KeyNames {
            password: None,
            ..names()
        }
    }

    fn no_file(p: &Path) -> std::io::Result<Vec<u8>> {
        panic!("{} read without a password file", p.display())
    }

    #[test]
    fn an_encrypted_key_needs_its_password_and_a_wrong_one_says_so() {
        let (pem, plain) = encrypted_key(b"s3cret");
        // Written by `echo`: the line ending is not part of the password.
        let got =
            decode_private_key(pem.as_bytes(), names(), |_| Ok(b"s3cret\n".to_vec())).unwrap();
        assert_eq!(got.key.secret_der(), plain.as_slice());
        assert!(!got.password_unused);

        let e =
            decode_private_key(pem.as_bytes(), names(), |_| Ok(b"not-it".to_vec())).unwrap_err();
        assert!(
            e.contains("cannot decrypt the private key /k.pem with the password in /pw")
                && e.contains("thePasswordSetting")
                && e.contains("wrong password"),
            "{e}"
        );
        let e = decode_private_key(pem.as_bytes(), names_without_password(), no_file).unwrap_err();
        assert!(e.contains("set thePasswordSetting"), "{e}");
    }

    #[test]
    fn every_wrong_password_says_so_even_one_that_passes_the_padding_check() {
        // About one wrong password in 256 decrypts to a valid padding; its bytes then fail
        // to parse. 3,000 tries meet that with odds of 1 - e^-11.7 (one PBKDF2 round each).
        let (pem, _) = encrypted_key_with(b"right", 1);
        for i in 0..3000 {
            let pw = format!("wrong-{i}").into_bytes();
            let e = decode_private_key(pem.as_bytes(), names(), |_| Ok(pw.clone())).unwrap_err();
            assert!(e.contains("wrong password"), "password {i}: {e}");
        }
    }

    #[test]
    fn a_plain_key_decodes_and_an_unused_password_is_reported() {
        let (_, plain) = encrypted_key(b"x");
        let pem =
            pkcs8::der::pem::encode_string("PRIVATE KEY", pkcs8::der::pem::LineEnding::LF, &plain)
                .unwrap();
        let got = decode_private_key(pem.as_bytes(), names_without_password(), no_file).unwrap();
        assert_eq!(got.key.secret_der(), plain.as_slice());
        assert!(!got.password_unused);
        assert!(
            decode_private_key(pem.as_bytes(), names(), |_| Ok(b"x".to_vec()))
                .unwrap()
                .password_unused
        );
    }

    #[test]
    fn traditional_encryption_and_broken_pem_are_refused_by_name() {
        let trad = "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-256-CBC,00\n\nAAAA\n-----END RSA PRIVATE KEY-----\n";
        let e = decode_private_key(trad.as_bytes(), names(), |_| Ok(b"pw".to_vec())).unwrap_err();
        assert!(
            e.contains("openssl pkcs8 -topk8") && e.contains("/k.pem"),
            "{e}"
        );
        let half = format!("-----BEGIN {ENCRYPTED_LABEL}-----\nAAAA\n");
        let e = decode_private_key(half.as_bytes(), names(), |_| Ok(b"pw".to_vec())).unwrap_err();
        assert!(e.contains("no -----END"), "{e}");
        let e = decode_private_key(
            b"-----BEGIN CERTIFICATE-----\n",
            names_without_password(),
            no_file,
        )
        .unwrap_err();
        assert!(e.contains("no usable private key in /k.pem"), "{e}");
    }
}
