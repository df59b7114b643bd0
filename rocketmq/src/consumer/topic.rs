//! Creating the consumer's topic on every broker master before it reads.
use super::*;

/// The broker names of `queues`.
fn brokers_of(queues: &[MessageQueue]) -> BTreeSet<String> {
    queues
        .iter()
        .map(|q| q.broker_name().as_str().to_owned())
        .collect()
}

/// Creates `topic` (4 queues per broker) unless its route already lists every broker master of
/// the `TBW102` template's route (every broker that auto-creates topics: a topic auto-created
/// by a send lives only on the broker that got the send), and waits until its route does.
pub(super) async fn ensure_topic(
    host: &ClientHost,
    namesrv_addr: &str,
    topic: &str,
    credentials: Option<&Credentials>,
) -> Result<(), String> {
    const ROUTE_DEADLINE: Duration = Duration::from_secs(15);
    let group = format!(
        "outbox_topic_init_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let mut builder = DefaultMQProducer::builder(host.runtime.clone())
        .producer_group(group)
        .name_server_addr(namesrv_addr)
        .send_msg_timeout(3_000);
    if let Some(c) = credentials {
        builder = builder.rpc_hook(c.rpc_hook());
    }
    let mut producer = builder.build();
    Box::pin(producer.start())
        .await
        .map_err(|e| client_error_text(&e))?;
    let result = Box::pin(async {
        // The brokers the topic must be on (none known: any route will do).
        let wanted = match Box::pin(
            producer.fetch_publish_message_queues(TopicValidator::AUTO_CREATE_TOPIC_KEY_TOPIC),
        )
        .await
        {
            Ok(queues) => brokers_of(&queues),
            Err(_) => BTreeSet::new(),
        };
        let covered = |queues: &[MessageQueue]| {
            let has = brokers_of(queues);
            !has.is_empty() && wanted.is_subset(&has)
        };
        let mut last = match Box::pin(producer.fetch_publish_message_queues(topic)).await {
            Ok(queues) if covered(&queues) => return Ok(()),
            Ok(queues) => format!("on brokers {:?} of {wanted:?}", brokers_of(&queues)),
            Err(e) => client_error_text(&e),
        };
        if let Err(e) = Box::pin(producer.create_topic(
            TopicValidator::AUTO_CREATE_TOPIC_KEY_TOPIC,
            topic,
            4,
            HashMap::new(),
        ))
        .await
        {
            last = client_error_text(&e);
        }
        let end = tokio::time::Instant::now() + ROUTE_DEADLINE;
        while tokio::time::Instant::now() < end {
            match Box::pin(producer.fetch_publish_message_queues(topic)).await {
                Ok(queues) if covered(&queues) => return Ok(()),
                Ok(queues) => last = format!("on brokers {:?} of {wanted:?}", brokers_of(&queues)),
                Err(e) => last = client_error_text(&e),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Err(format!(
            "topic {topic} has no route on every broker after {} s: {last}",
            ROUTE_DEADLINE.as_secs()
        ))
    })
    .await;
    Box::pin(producer.shutdown()).await;
    result
}
