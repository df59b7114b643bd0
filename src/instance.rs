//! Instance ids, and the claim owners stored in `claim_owner`: `<instance id>#<claim token>`,
//! the token 16 random hex digits of one claim alone. Every later transition of the event is
//! guarded by the whole value, so it is a fencing token: neither a second process with the same
//! instance id nor this instance's own earlier, lapsed claim can touch a newer claim.
use sea_orm_outbox_entity::event_record::CLAIM_OWNER_MAX_LEN;

/// Characters a claim adds to the instance id in `claim_owner`: `#` and 16 hex digits.
const CLAIM_TOKEN_LEN: usize = 17;

/// Longest instance id a worker accepts: the `claim_owner` column less the claim token.
pub(crate) const INSTANCE_ID_MAX_LEN: usize = CLAIM_OWNER_MAX_LEN - CLAIM_TOKEN_LEN;

/// The `claim_owner` value of one new claim by `instance`: `<instance>#<16 random hex digits>`.
pub(crate) fn claim_owner(instance: &str) -> String {
    let token = uuid::Uuid::new_v4().as_u128() as u64;
    format!("{instance}#{token:016x}")
}

/// An instance id `{service}-{pid}-{6 random hex}`, for example `order-4242-a1b2c3`: the random
/// suffix keeps a restarted process from inheriting its predecessor's leases.
pub(crate) fn instance_id(service: &str) -> String {
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    format!("{service}-{}-{}", std::process::id(), &suffix[..6])
}

#[cfg(test)]
mod tests {
    #[test]
    fn shape() {
        let id = super::instance_id("order");
        let prefix = format!("order-{}-", std::process::id());
        assert!(id.starts_with(&prefix));
        assert_eq!(id.len(), prefix.len() + 6);
        assert_ne!(id, super::instance_id("order"));
    }

    #[test]
    fn claim_owners_are_unique_and_name_their_instance() {
        let a = super::claim_owner("order-1");
        let b = super::claim_owner("order-1");
        assert_ne!(a, b);
        assert_eq!(a.len(), "order-1".len() + super::CLAIM_TOKEN_LEN);
        assert_eq!(a.rsplit_once('#').map(|(i, _)| i), Some("order-1"));
    }
}
