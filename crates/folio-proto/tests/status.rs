//! Status code tables: v3 values, v2 return codes, and the conversions between them.

use folio_proto::pb::StatusCode;
use folio_proto::status::v2_rc;
use folio_proto::{ProtoError, Status};

#[test]
fn v3_values_are_bookkeepers() {
    let table = [
        (StatusCode::Eok, 0),
        (StatusCode::Enoledger, 402),
        (StatusCode::Enoentry, 403),
        (StatusCode::Ebadreq, 404),
        (StatusCode::Eio, 501),
        (StatusCode::Eua, 502),
        (StatusCode::Ebadversion, 503),
        (StatusCode::Efenced, 504),
        (StatusCode::Ereadonly, 505),
        (StatusCode::Etoomanyrequests, 506),
        (StatusCode::Eunknownledgerstate, 507),
    ];
    for (code, value) in table {
        assert_eq!(code as i32, value);
        assert_eq!(Status::from_v3_value(value).unwrap().to_v3(), code);
    }
    assert_eq!(
        Status::from_v3_value(1),
        Err(ProtoError::UnknownEnumValue {
            field: "StatusCode",
            value: 1
        })
    );
}

#[test]
fn v2_codes_are_bookkeepers_and_map_to_v3() {
    let table = [
        (Status::Ok, 0, StatusCode::Eok),
        (Status::NoLedger, 1, StatusCode::Enoledger),
        (Status::NoEntry, 2, StatusCode::Enoentry),
        (Status::BadRequest, 100, StatusCode::Ebadreq),
        (Status::Io, 101, StatusCode::Eio),
        (Status::Unauthorized, 102, StatusCode::Eua),
        (Status::BadVersion, 103, StatusCode::Ebadversion),
        (Status::Fenced, 104, StatusCode::Efenced),
        (Status::ReadOnly, 105, StatusCode::Ereadonly),
        (Status::TooManyRequests, 106, StatusCode::Etoomanyrequests),
        (
            Status::UnknownLedgerState,
            107,
            StatusCode::Eunknownledgerstate,
        ),
    ];
    assert_eq!(table.len(), Status::ALL.len());
    for (status, rc, v3) in table {
        assert_eq!(status.v2_code(), rc);
        assert_eq!(Status::from_v2_rc(rc), Ok(status));
        assert_eq!(status.to_v3(), v3);
        assert_eq!(Status::from(v3), status);
        assert_eq!(StatusCode::from(status), v3);
    }
    assert_eq!(v2_rc::EUNKNOWNLEDGERSTATE, 107);
}

#[test]
fn only_unknown_ledger_state_is_rewritten_for_v2_clients() {
    for s in Status::ALL {
        if s == Status::UnknownLedgerState {
            assert_eq!(s.to_v2_rc(), v2_rc::EIO);
        } else {
            assert_eq!(s.to_v2_rc(), s.v2_code());
        }
    }
}

#[test]
fn unknown_v2_codes_are_errors() {
    for rc in [-1, 3, 99, 108, 402] {
        assert_eq!(
            Status::from_v2_rc(rc),
            Err(ProtoError::UnknownV2ReturnCode(rc))
        );
    }
}

#[test]
fn display_uses_bookkeeper_names() {
    assert_eq!(Status::Fenced.to_string(), "EFENCED");
    assert_eq!(Status::Ok.to_string(), "EOK");
    assert!(Status::Ok.is_ok() && !Status::Io.is_ok());
}
