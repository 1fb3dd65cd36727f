//! The global `--tls-ca`, `--tls-cert`, `--tls-key`, `--tls-key-password-file` flags (or
//! `FOLIO_TLS_CA`, `FOLIO_TLS_CERT`, `FOLIO_TLS_KEY`, `FOLIO_TLS_KEY_PASSWORD_FILE`): TLS to every bookie a command talks to, through BookKeeper's StartTLS,
//! hostname verification always on. `main` records the flags; every command that builds a
//! client takes its configuration from [`client_config`], so no command can forget TLS. The
//! files are read on first use, so a command that talks to no bookie never fails over them.

use std::path::PathBuf;
use std::sync::OnceLock;

use anyhow::bail;
use folio_client::{ClientCertFiles, ClientConfig, ClientTls};

#[derive(clap::Args, Debug, Clone, Default)]
pub struct TlsArgs {
    /// CA certificates (PEM) that bookie certificates must chain to; turns TLS to bookies on.
    #[arg(
        long = "tls-ca",
        global = true,
        env = "FOLIO_TLS_CA",
        value_name = "FILE"
    )]
    pub ca: Option<PathBuf>,
    /// Client certificate chain (PEM), for bookies that require client authentication.
    #[arg(
        long = "tls-cert",
        global = true,
        env = "FOLIO_TLS_CERT",
        value_name = "FILE"
    )]
    pub cert: Option<PathBuf>,
    /// The client certificate's private key (PEM; an encrypted PKCS#8 key needs
    /// --tls-key-password-file).
    #[arg(
        long = "tls-key",
        global = true,
        env = "FOLIO_TLS_KEY",
        value_name = "FILE"
    )]
    pub key: Option<PathBuf>,
    /// The file holding the password of an encrypted --tls-key (its content; a trailing line
    /// ending is ignored), as BookKeeper's clientKeyStorePasswordPath.
    #[arg(
        long = "tls-key-password-file",
        global = true,
        env = "FOLIO_TLS_KEY_PASSWORD_FILE",
        value_name = "FILE"
    )]
    pub key_password: Option<PathBuf>,
}

static ARGS: OnceLock<TlsArgs> = OnceLock::new();
static LOADED: OnceLock<Result<Option<ClientTls>, String>> = OnceLock::new();

/// Records the flags (once, from `main`).
pub fn set(args: TlsArgs) {
    let _ = ARGS.set(args);
}

fn load(args: &TlsArgs) -> anyhow::Result<Option<ClientTls>> {
    let client = match (&args.cert, &args.key) {
        (Some(c), Some(k)) => Some(ClientCertFiles {
            cert: c,
            key: k,
            key_password: args.key_password.as_deref(),
        }),
        (None, None) => None,
        (Some(_), None) => bail!("--tls-cert needs --tls-key (the certificate's private key)"),
        (None, Some(_)) => bail!("--tls-key needs --tls-cert (the client certificate)"),
    };
    if args.key_password.is_some() && client.is_none() {
        bail!("--tls-key-password-file needs --tls-cert and --tls-key (the key it decrypts)");
    }
    let Some(ca) = &args.ca else {
        if client.is_some() {
            bail!(
                "--tls-cert and --tls-key need --tls-ca (the CA that bookie certificates chain to)"
            );
        }
        return Ok(None);
    };
    Ok(Some(ClientTls::from_pem_files(ca, client)?))
}

/// The CA bundle `--tls-ca` names, if given (also what `folio autorecovery`'s dashboard
/// trusts for bookies' HTTPS admin endpoints).
pub fn ca_file() -> Option<PathBuf> {
    ARGS.get().and_then(|a| a.ca.clone())
}

/// The client's TLS from the global flags (`None`: plaintext).
pub fn client_tls() -> anyhow::Result<Option<ClientTls>> {
    let loaded = LOADED.get_or_init(|| {
        load(ARGS.get().unwrap_or(&TlsArgs::default())).map_err(|e| format!("{e:#}"))
    });
    loaded.clone().map_err(anyhow::Error::msg)
}

/// The default client configuration with the global TLS flags applied, and the global
/// placement flags ([`crate::client_placement`]).
pub fn client_config() -> anyhow::Result<ClientConfig> {
    crate::client_placement::apply(ClientConfig {
        tls: client_tls()?,
        ..ClientConfig::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_given_flags_are_refused() {
        let args = |ca: bool, cert: bool, key: bool| TlsArgs {
            ca: ca.then(|| "/nonexistent/ca.pem".into()),
            cert: cert.then(|| "/c.pem".into()),
            key: key.then(|| "/k.pem".into()),
            key_password: None,
        };
        assert!(load(&args(false, false, false)).unwrap().is_none());
        let e = load(&args(false, true, true)).unwrap_err().to_string();
        assert!(e.contains("--tls-ca"), "{e}");
        let e = load(&args(true, true, false)).unwrap_err().to_string();
        assert!(e.contains("--tls-key"), "{e}");
        let e = load(&args(true, false, false)).unwrap_err().to_string();
        assert!(e.contains("/nonexistent/ca.pem"), "{e}");
        let alone = TlsArgs {
            key_password: Some("/pw".into()),
            ..args(true, false, false)
        };
        let e = load(&alone).unwrap_err().to_string();
        assert!(e.contains("--tls-key-password-file needs"), "{e}");
    }
}
