//! A stand-in for a storage layer that honours fencing tokens: a write carries the writer's
//! token and is refused when the store has already seen a larger one for that record. Lives on
//! a Redis server of its own (one atomic script per write), like any shared store would.

use redis::aio::MultiplexedConnection;

/// Compare-and-write: KEYS[1] the record, KEYS[2] the highest token seen for it.
/// ARGV[1] the value, ARGV[2] the writer's token. Returns 1 when written, 0 when refused.
const WRITE: &str = r#"
local seen = tonumber(redis.call('get', KEYS[2]) or '0')
local token = tonumber(ARGV[2])
if token < seen then
  return 0
end
redis.call('set', KEYS[2], token)
redis.call('set', KEYS[1], ARGV[1])
return 1
"#;

/// A record store that rejects writes with stale fencing tokens.
#[derive(Clone)]
pub struct FencedStore {
    conn: MultiplexedConnection,
}

impl std::fmt::Debug for FencedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FencedStore").finish_non_exhaustive()
    }
}

impl FencedStore {
    /// Connects to the store's server.
    ///
    /// # Errors
    /// The server could not be reached.
    pub async fn connect(client: &redis::Client) -> redis::RedisResult<FencedStore> {
        Ok(FencedStore {
            conn: client.get_multiplexed_async_connection().await?,
        })
    }

    /// Writes `value` to `record` if `token` is not older than the newest token the record
    /// has seen. Returns whether it was written.
    ///
    /// # Errors
    /// The server failed.
    pub async fn write(&self, record: &str, value: &str, token: u64) -> redis::RedisResult<bool> {
        let mut conn = self.conn.clone();
        let written: i64 = redis::Script::new(WRITE)
            .key(record)
            .key(format!("{record}:token"))
            .arg(value)
            .arg(token)
            .invoke_async(&mut conn)
            .await?;
        Ok(written == 1)
    }

    /// The record's current value.
    ///
    /// # Errors
    /// The server failed.
    pub async fn read(&self, record: &str) -> redis::RedisResult<Option<String>> {
        let mut conn = self.conn.clone();
        redis::cmd("GET").arg(record).query_async(&mut conn).await
    }
}
