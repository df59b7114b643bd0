//! Instance ids stored in `claim_owner`.

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
}
