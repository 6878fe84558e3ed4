//! The library's own node scripts, run on one node for tests of the scripts: a fair lock's
//! attempts, ticket draws, rollbacks and withdrawals, and a reader's release.

use std::time::Duration;

/// **For negative tests only**: one attempt of a fair lock on one node, with `place` as the
/// waiter's position in that node's line (the fair lock's own acquire script, as a request
/// with a ticket sends it; the key's counter is raised to `place`). The library orders every
/// node's line by the same ticket; a test gives each node its own order (as if each ordered
/// its waiters by arrival) to show what tickets prevent. Answers whether the node gave the
/// key to `holder`.
pub async fn fair_attempt_on_node(
    node: &mut redis::aio::MultiplexedConnection,
    key: &[u8],
    waiter: &str,
    holder: &str,
    ttl: Duration,
    place: u64,
    queue_lease: Duration,
) -> redis::RedisResult<bool> {
    let attempt = FairAttempt {
        waiter,
        holder,
        ttl,
        place,
        round: 1,
    };
    fair_attempt_in_round_on_node(node, key, attempt, queue_lease).await
}

/// **For tests of the node scripts**: one attempt of a waiting fair request (see
/// [`fair_attempt_on_node`]) on one node.
#[derive(Clone, Copy, Debug)]
pub struct FairAttempt<'a> {
    /// The request's waiter id.
    pub waiter: &'a str,
    /// The attempt's holder value (`<base>:<nonce>`).
    pub holder: &'a str,
    /// The TTL it asks for.
    pub ttl: Duration,
    /// The ticket: the waiter's place in line.
    pub place: u64,
    /// The attempt's round (counted from 1 within a request): the request's hand-off values
    /// of earlier rounds are claimed by it, of this round or later ones are not.
    pub round: u64,
}

/// **For tests of the node scripts**: `attempt` on one node. Answers whether the node gave the
/// key to its holder value.
pub async fn fair_attempt_in_round_on_node(
    node: &mut redis::aio::MultiplexedConnection,
    key: &[u8],
    attempt: FairAttempt<'_>,
    queue_lease: Duration,
) -> redis::RedisResult<bool> {
    let FairAttempt {
        waiter,
        holder,
        ttl,
        place,
        round,
    } = attempt;
    let mut standing = standing(Some(place));
    standing.round = round;
    let (call, _) =
        fair_shape(key, waiter, holder, queue_lease, ttl)?.acquire(holder, &ms(ttl), &standing);
    let answer: redis::Value = call.eval().query_async(node).await?;
    Ok(answer == redis::Value::Int(1))
}

/// **For tests of the node scripts**: the first attempt of a waiting fair request on one
/// node, with no ticket yet (the library's own call). Answers the ticket number the node drew
/// when it refused (someone holds the key or waits), or `None` when it gave the key to
/// `holder`.
pub async fn fair_first_attempt_on_node(
    node: &mut redis::aio::MultiplexedConnection,
    key: &[u8],
    waiter: &str,
    holder: &str,
    ttl: Duration,
    queue_lease: Duration,
) -> redis::RedisResult<Option<u64>> {
    let (call, _) = fair_shape(key, waiter, holder, queue_lease, ttl)?.acquire(
        holder,
        &ms(ttl),
        &standing(None),
    );
    match call.eval().query_async(node).await? {
        redis::Value::Int(1) => Ok(None),
        redis::Value::Array(items) => match items.as_slice() {
            [_, redis::Value::Int(n), ..] => Ok(u64::try_from(*n).ok()),
            _ => Err(unexpected("a fair first attempt")),
        },
        _ => Err(unexpected("a fair first attempt")),
    }
}

/// **For tests of the node scripts**: a fair lock's ticket drawn on one node in a round of
/// its own (the library's own call, made when fewer than a quorum of nodes drew it with the
/// request's first attempt). Answers the ticket number.
pub async fn fair_draw_on_node(
    node: &mut redis::aio::MultiplexedConnection,
    key: &[u8],
    queue_lease: Duration,
) -> redis::RedisResult<u64> {
    let crate::family::Shape::Fair(fair) =
        fair_shape(key, "waiter", "holder", queue_lease, queue_lease)?
    else {
        unreachable!("a fair shape")
    };
    fair.draw().0.eval().query_async(node).await
}

/// **For tests of the node scripts**: the rollback of a failed fair attempt that held the key
/// with `holder` on one node (the library's own call), as it would land there late. Answers
/// whether it deleted the key.
pub async fn fair_rollback_on_node(
    node: &mut redis::aio::MultiplexedConnection,
    key: &[u8],
    waiter: &str,
    holder: &str,
) -> redis::RedisResult<bool> {
    let shape = fair_shape(key, waiter, holder, Duration::ZERO, Duration::ZERO)?;
    let (call, read) = shape.release_handing_off(holder, crate::family::Notice::Rollback, &[]);
    let answer: redis::Value = call.eval().query_async(node).await?;
    Ok(matches!(read(&answer), Some(crate::family::Answer::Yes(_))))
}

/// **For tests of the node scripts**: the withdrawal of a fair waiter from the line on one
/// node (the library's own call, as a request that gives up, or is cut off from a quorum,
/// sends it), for the request whose holder values include `holder`. Answers whether it
/// deleted the key (a grant, or an attempt's value, of that request).
pub async fn fair_withdraw_on_node(
    node: &mut redis::aio::MultiplexedConnection,
    key: &[u8],
    waiter: &str,
    holder: &str,
) -> redis::RedisResult<bool> {
    let shape = fair_shape(key, waiter, holder, Duration::ZERO, Duration::ZERO)?;
    let Some(call) = shape.withdraw() else {
        return Err(unexpected("a fair withdrawal"));
    };
    let answer: redis::Value = call.eval().query_async(node).await?;
    Ok(answer == redis::Value::Int(1))
}

/// **For tests of the node scripts**: the release of a read lock of `key` held with
/// `holder`, on one node (the library's own call). A test runs it node by node in an order
/// of its choosing, as concurrent releases of several readers can interleave. Answers whether
/// the reader held the key there.
pub async fn read_release_on_node(
    node: &mut redis::aio::MultiplexedConnection,
    key: &[u8],
    holder: &str,
) -> redis::RedisResult<bool> {
    let key = crate::rules::key::Key::new(key).map_err(|e| invalid(e.to_string()))?;
    let call = crate::family::Shape::Read(crate::family::Read { key })
        .release(holder, crate::family::Notice::Release);
    let answer: redis::Value = call.eval().query_async(node).await?;
    Ok(answer == redis::Value::Int(1))
}

fn ms(d: Duration) -> String {
    d.as_millis().to_string()
}

fn invalid(reason: String) -> redis::RedisError {
    redis::RedisError::from((redis::ErrorKind::Client, "bad argument", reason))
}

fn unexpected(what: &'static str) -> redis::RedisError {
    redis::RedisError::from((redis::ErrorKind::Client, "unexpected reply to", what.into()))
}

/// A fair request as the library makes it, for the script calls above.
fn fair_shape(
    key: &[u8],
    waiter: &str,
    holder: &str,
    queue_lease: Duration,
    claim: Duration,
) -> redis::RedisResult<crate::family::Shape> {
    // The request's base, as the library keeps it: the holder value but its last part.
    let holder = crate::Holder::parse(holder).map_err(|e| invalid(e.to_string()))?;
    let base = holder.fair_base_of().map_or(holder, |(_, base)| base);
    Ok(crate::family::Shape::Fair(crate::family::Fair {
        key: crate::rules::key::Key::new(key).map_err(|e| invalid(e.to_string()))?,
        waiter: waiter.into(),
        base,
        queue_lease_ms: ms(queue_lease).into(),
        claim_ms: ms(claim).into(),
    }))
}

/// A waiting request's standing after its first round: with `ticket` once drawn.
fn standing(ticket: Option<u64>) -> crate::family::Standing {
    crate::family::Standing {
        ticket,
        round: 1,
        draws: true,
    }
}
