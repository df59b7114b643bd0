//! Instance ids, and the claim owners stored in `claim_owner`.
//!
//! Every claim writes `claim_owner = '<instance id>#<claim token>'`: the instance that holds the
//! lease, and a token of 16 hex digits drawn at random for that claim alone. Every later
//! transition of the event (mark, release, renewal) is guarded by the whole value, so it is a
//! fencing token: neither a second process started with the same instance id nor this
//! instance's own earlier attempt (whose lease lapsed and was claimed again) can touch a newer
//! claim. Reading `claim_owner` up to the `#` still tells which instance holds the lease.
use sea_orm_outbox_entity::event_record::CLAIM_OWNER_MAX_LEN;

/// Characters a claim adds to the instance id in `claim_owner`: `#` and 16 hex digits.
pub const CLAIM_TOKEN_LEN: usize = 17;

/// Longest instance id a worker accepts: the `claim_owner` column (128 characters) less the
/// claim token ([`CLAIM_TOKEN_LEN`]), 111 characters.
pub const INSTANCE_ID_MAX_LEN: usize = CLAIM_OWNER_MAX_LEN - CLAIM_TOKEN_LEN;

/// The `claim_owner` value of one new claim by `instance`: `<instance>#<16 random hex digits>`.
pub fn claim_owner(instance: &str) -> String {
    let token = uuid::Uuid::new_v4().as_u128() as u64;
    format!("{instance}#{token:016x}")
}

/// The instance id part of a `claim_owner` value (all of it when it holds no claim token).
pub fn instance_of(claim_owner: &str) -> &str {
    claim_owner
        .rsplit_once('#')
        .map_or(claim_owner, |(instance, _)| instance)
}

/// An instance id `{service}-{port or pid}-{6 hex}`, for example `order-8083-a1b2c3`: the
/// service name, the listening port when given (else the process id), and a random suffix so
/// that a restarted process never inherits its predecessor's leases.
pub fn instance_id(service: &str, port: Option<u16>) -> String {
    let place = port.map_or_else(|| std::process::id().to_string(), |p| p.to_string());
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    format!("{service}-{place}-{}", &suffix[..6])
}

#[cfg(test)]
mod tests {
    #[test]
    fn shape() {
        let id = super::instance_id("order", Some(8083));
        assert!(id.starts_with("order-8083-"));
        assert_eq!(id.len(), "order-8083-".len() + 6);
        assert_ne!(id, super::instance_id("order", Some(8083)));
    }

    #[test]
    fn claim_owners_are_unique_and_name_their_instance() {
        let a = super::claim_owner("order-1");
        let b = super::claim_owner("order-1");
        assert_ne!(a, b);
        assert_eq!(a.len(), "order-1".len() + super::CLAIM_TOKEN_LEN);
        assert_eq!(super::instance_of(&a), "order-1");
        assert_eq!(super::instance_of("old-style"), "old-style");
    }
}
