//! Extended attributes for [`Inner`]: they live in the inode record, so
//! reading one is reading the record (from the mirror while the watch is
//! current, as `getattr` does) and changing one is the read-modify-write
//! of the record every other inode change makes: the record is read at
//! one revision, the change (with its `XATTR_CREATE`/`XATTR_REPLACE`
//! check and the size limits) is applied to that state, and the new
//! record (with a new ctime) is committed only if the record's
//! mod_revision is still the one read; otherwise it is read again and the
//! change recomputed. An error (EEXIST, ENODATA, ENOSPC) is the answer
//! for the state of a linearizable read, so it too is an outcome one
//! machine could have given.
//!
//! Other clients see a change through the watch: the new record replaces
//! their mirrored one (attributes included) and the inode is reported to
//! their Vfs, like any attribute change.

use std::sync::Arc;

use dcache::{Errno, Ino, Result, Timespec};

use super::client::{put, rec_of, same, Outcome};
use super::{EtcdFs, Inner};
use crate::codec::Rec;
use crate::xattr::Xattrs;

impl EtcdFs {
    /// The extended attributes of `ino`: the mirror's (shared, nothing
    /// copied, no runtime entered) while the watch is current, else read
    /// from etcd.
    pub(super) fn xattrs_of(&self, ino: Ino) -> Result<Arc<Xattrs>> {
        let i = &self.inner;
        if let Some(x) = i.cache.xattrs(ino) {
            return Ok(x);
        }
        self.block(async { i.fetch(i.deadline(), ino).await.map(|r| r.xattrs) })
    }
}

impl Inner {
    /// The record of `ino`: the mirror's while the watch is current, else
    /// read from etcd.
    pub(super) async fn current_rec(&self, ino: Ino) -> Result<Rec> {
        match self.cache.rec(ino) {
            Some(r) => Ok(r),
            None => self.fetch(self.deadline(), ino).await,
        }
    }

    /// Apply `change` to `ino`'s attributes and commit the record with a
    /// new ctime, if it has not changed since it was read (else again).
    pub(super) async fn change_xattrs(
        &self,
        ino: Ino,
        change: impl Fn(&mut Xattrs) -> Result<()>,
    ) -> Result<()> {
        let dl = self.deadline();
        let ikey = self.keys.inode(ino);
        let mut attempt = 0;
        loop {
            let (_, rs) = self
                .read(dl, vec![super::client::get(ikey.clone())])
                .await?;
            let (mut rec, mr) = rec_of(&rs[0])?.ok_or(Errno::ENOENT)?;
            change(Arc::make_mut(&mut rec.xattrs))?;
            rec.ctime = Timespec::now();
            let ops = vec![put(ikey.clone(), rec.encode())];
            match self.commit(dl, vec![same(ikey.clone(), mr)], ops).await? {
                Outcome::Committed(rev) => {
                    self.cache.record(ino, Some((&rec, rev)), rev);
                    return Ok(());
                }
                Outcome::Conflict => {
                    attempt += 1;
                    self.pause(attempt).await;
                }
            }
        }
    }
}
