//! Following a redirect, for a compare-and-delete only (docs/DESIGN.md, "Cluster nodes"): a
//! release, a rollback or a withdrawal answered `MOVED` or `ASK` is sent once more, to the
//! primary named, within the same node timeout. An acquire or an extend never is (see
//! `cluster`): its redirect is one "no".
//!
//! Why this keeps the ordering argument: every effect of these scripts is conditioned on this
//! holder's own entry being there (its holder value is its own, per attempt); a delete that
//! runs late, after the lock passed on, finds another holder's entry and does nothing, and it
//! can never create an entry (a fair release hands the key to the next in line only in place
//! of this holder's own entry). Nothing of the same lease follows it: a release is a lease's
//! last call; a rollback's attempt is over, and a retry has a holder value of its own.

use redis::{ErrorKind, ServerErrorKind, Value};

use crate::error::NodeFailure;
use crate::scripts::Call;

use super::send::{answered, send, write, Caller, Packed, SendError};
use super::shard::Connected;
use super::Node;

/// Where a redirect answer sends a request.
pub(super) struct Redirect {
    /// `ASK` (the slot is being migrated: `ASKING` first, for this one command), else
    /// `MOVED`.
    ask: bool,
    /// `host:port`, as the answer names it.
    to: String,
}

impl Redirect {
    /// The redirect `e` is, when `call` may follow one.
    pub(super) fn of(call: &Call, e: &SendError) -> Option<Redirect> {
        if !call.follows_redirect() {
            return None;
        }
        let SendError::Redis(e) = e else {
            return None;
        };
        let ask = match e.kind() {
            ErrorKind::Server(ServerErrorKind::Ask) => true,
            ErrorKind::Server(ServerErrorKind::Moved) => false,
            _ => return None,
        };
        let (to, _) = e.redirect_node()?;
        Some(Redirect {
            ask,
            to: to.to_string(),
        })
    }
}

impl Node {
    /// Sends `call` once to the primary `redirect` names (as plain EVAL: that primary may not
    /// have the script loaded, and after `ASKING` only the next command may run there).
    /// `failure` is the redirect's own, returned when the redirect names no usable address
    /// (an unknown endpoint: the map's refresh decides).
    pub(super) async fn follow(
        &self,
        call: &Call,
        caller: Caller<'_>,
        redirect: Redirect,
        failure: NodeFailure,
    ) -> Result<Value, NodeFailure> {
        let Some(cluster) = self.cluster.get() else {
            return Err(failure);
        };
        let Some(shard) = cluster.redirect_target(&redirect.to) else {
            return Err(failure);
        };
        let (generation, conn) = self.connection(&shard).await?;
        tracing::debug!(node = %self.name(), ask = redirect.ask, script = call.name, "following a redirect");
        let answer = match redirect.ask {
            false => send(&conn, &call.eval(), call, caller, self.timeout).await,
            true => self.asking(&conn, call, caller).await,
        };
        answer
            .and_then(answered)
            .map_err(|e| self.named(&shard, self.failure(&shard, generation, &e)))
    }

    /// `ASKING` and the call's EVAL as one write (a pipeline): nothing else this client sends
    /// on the connection can come between them and run with the `ASKING` flag (an acquire
    /// let into an importing slot could take a key the source still holds). Written and
    /// counted as any request ([`write`]).
    async fn asking(
        &self,
        conn: &Connected,
        call: &Call,
        caller: Caller<'_>,
    ) -> Result<Value, SendError> {
        let mut pipe = redis::pipe();
        pipe.cmd("ASKING").add_command(call.eval());
        write(conn, Packed::Asking(&pipe), call, caller, self.timeout).await
    }
}
