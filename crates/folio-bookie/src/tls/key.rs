//! The bookie's private key from its PEM file (`tlsKeyStore`): PKCS#8, PKCS#1 or SEC1 in the
//! clear, or an encrypted PKCS#8 key (`ENCRYPTED PRIVATE KEY`, PBES2: PBKDF2 or scrypt with
//! AES-CBC, what `openssl pkcs8 -topk8 -v2 aes-256-cbc` writes) decrypted with the password in
//! `tlsKeyStorePasswordPath`, as BookKeeper's PEM key store takes it. The password is the
//! file's content (UTF-8); if that does not decrypt the key, the content without its trailing
//! line ending is tried too (a file written by `echo`). OpenSSL's older "traditional"
//! encryption (`Proc-Type: 4,ENCRYPTED`) is refused with the command that converts it.

use std::path::Path;

use pkcs8::EncryptedPrivateKeyInfo;
use pkcs8::der::Decode;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

use super::{TlsError, err, read_pem_file};

const ENCRYPTED_LABEL: &str = "ENCRYPTED PRIVATE KEY";

/// The private key of the PEM file `path`, decrypted with the password in `password` (a
/// file) when the key is encrypted.
pub fn load_key(path: &Path, password: Option<&Path>) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = read_pem_file(path, "private key")?;
    let text = String::from_utf8_lossy(&bytes);
    if text.contains("Proc-Type: 4,ENCRYPTED") {
        return Err(err(format!(
            "the private key {} is encrypted the traditional OpenSSL way, which Folio does not \
             read: convert it to an encrypted PKCS#8 key (openssl pkcs8 -topk8 -v2 aes-256-cbc)",
            path.display()
        )));
    }
    let Some(der) = encrypted_block(&text, path)? else {
        if password.is_some() {
            tracing::warn!(
                "tlsKeyStorePasswordPath is set but the private key {} is not encrypted",
                path.display()
            );
        }
        return PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| {
            err(format!(
                "no usable private key in {} ({e}); an encrypted key needs \
                 tlsKeyStorePasswordPath and must be PKCS#8 (ENCRYPTED PRIVATE KEY)",
                path.display()
            ))
        });
    };
    let Some(password) = password else {
        return Err(err(format!(
            "the private key {} is encrypted: set tlsKeyStorePasswordPath to the file holding \
             its password",
            path.display()
        )));
    };
    let secret = std::fs::read(password).map_err(|e| {
        err(format!(
            "cannot read the key password file (tlsKeyStorePasswordPath) {}: {e}",
            password.display()
        ))
    })?;
    decrypt(&der, &secret)
        .map(|k| PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(k)))
        .map_err(|why| {
            err(format!(
                "cannot decrypt the private key {} with the password in {} \
                 (tlsKeyStorePasswordPath): {why}",
                path.display(),
                password.display()
            ))
        })
}

/// The DER of the file's `ENCRYPTED PRIVATE KEY` block, if it has one.
fn encrypted_block(text: &str, path: &Path) -> Result<Option<Vec<u8>>, TlsError> {
    let begin = format!("-----BEGIN {ENCRYPTED_LABEL}-----");
    let end = format!("-----END {ENCRYPTED_LABEL}-----");
    let Some(start) = text.find(&begin) else {
        return Ok(None);
    };
    let Some(stop) = text[start..].find(&end) else {
        return Err(err(format!(
            "the private key {} has no {end} line",
            path.display()
        )));
    };
    let block = &text[start..start + stop + end.len()];
    let (label, der) = pkcs8::der::pem::decode_vec(block.as_bytes()).map_err(|e| {
        err(format!(
            "invalid PEM in the private key {}: {e}",
            path.display()
        ))
    })?;
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
            Err(e) => return Err(e.to_string()),
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pkcs8::pkcs5::pbes2;

    /// A fresh key (rcgen), encrypted with `password` (PBKDF2-SHA256, AES-256-CBC), as PEM.
    fn encrypted_key(password: &[u8]) -> (String, Vec<u8>) {
        let key = rcgen::KeyPair::generate().unwrap();
        let plain = key.serialize_der();
        let params =
            pbes2::Parameters::pbkdf2_sha256_aes256cbc(2048, b"salt-for-test", &[7u8; 16]).unwrap();
        let info = pkcs8::PrivateKeyInfo::from_der(&plain).unwrap();
        let enc = info.encrypt_with_params(params, password).unwrap();
        let der = enc.as_bytes().to_vec();
        let pem =
            pkcs8::der::pem::encode_string(ENCRYPTED_LABEL, pkcs8::der::pem::LineEnding::LF, &der)
                .unwrap();
        (pem, plain)
    }

    #[test]
    fn an_encrypted_key_is_decrypted_with_the_password_file_and_a_wrong_one_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let (pem, plain) = encrypted_key(b"s3cret");
        let key = dir.path().join("key.pem");
        std::fs::write(&key, &pem).unwrap();
        let pw = dir.path().join("pw");
        // Written by `echo`: the line ending is not part of the password.
        std::fs::write(&pw, "s3cret\n").unwrap();
        let got = load_key(&key, Some(&pw)).unwrap();
        assert_eq!(got.secret_der(), plain.as_slice());

        std::fs::write(&pw, "not-it").unwrap();
        let e = load_key(&key, Some(&pw)).unwrap_err().to_string();
        assert!(
            e.contains("cannot decrypt") && e.contains("wrong password") && e.contains("pw"),
            "{e}"
        );
        let e = load_key(&key, None).unwrap_err().to_string();
        assert!(e.contains("tlsKeyStorePasswordPath"), "{e}");
        let e = load_key(&key, Some(&dir.path().join("missing")))
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot read the key password file"), "{e}");
        std::fs::write(
            &key,
            "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-256-CBC,00\n\nAAAA\n-----END RSA PRIVATE KEY-----\n",
        )
        .unwrap();
        let e = load_key(&key, Some(&pw)).unwrap_err().to_string();
        assert!(e.contains("openssl pkcs8 -topk8"), "{e}");
    }
}
