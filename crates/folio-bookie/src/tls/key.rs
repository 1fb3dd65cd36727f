//! The bookie's private key from its PEM file (`tlsKeyStore`), decrypted with the password in
//! `tlsKeyStorePasswordPath` when it is an encrypted PKCS#8 key, as BookKeeper's PEM key store
//! takes it. The decoding is folio-proto's `tls_key`, shared with the client; this reads the
//! files and names the bookie's settings.

use std::path::Path;

use folio_proto::tls_key::{KeyNames, decode_private_key};
use rustls_pki_types::PrivateKeyDer;

use super::{TlsError, err, read_pem_file};

/// The private key of the PEM file `path`, decrypted with the password in `password` (a
/// file) when the key is encrypted.
pub fn load_key(path: &Path, password: Option<&Path>) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = read_pem_file(path, "private key")?;
    let decoded = decode_private_key(
        &bytes,
        KeyNames {
            key: path,
            password,
            password_setting: "tlsKeyStorePasswordPath",
        },
        |p| std::fs::read(p),
    )
    .map_err(err)?;
    if decoded.password_unused {
        tracing::warn!(
            "tlsKeyStorePasswordPath is set but the private key {} is not encrypted",
            path.display()
        );
    }
    Ok(decoded.key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pkcs8::der::Decode;
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
        let pem = pkcs8::der::pem::encode_string(
            folio_proto::tls_key::ENCRYPTED_LABEL,
            pkcs8::der::pem::LineEnding::LF,
            &der,
        )
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
