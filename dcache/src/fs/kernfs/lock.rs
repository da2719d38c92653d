//! The one tree lock, of a kind chosen at construction.
//!
//! kernfs' history is a change of lock kind: a global mutex that every path
//! walk took (even for pure lookups), later an rwsem so that walks only share
//! it. Writing the tree code once over this enum lets the benchmark compare
//! the two with nothing else changed.

use std::ops::{Deref, DerefMut};

use crate::sync::{
    LockExt, Mutex, MutexGuard, RwLock, RwLockExt, RwLockReadGuard, RwLockWriteGuard,
};

/// Which lock guards the kernfs tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LockKind {
    /// One mutex: readers exclude each other (kernfs before Linux 5.15).
    Mutex,
    /// A reader-writer lock: lookups and attribute reads share it.
    RwLock,
}

pub(super) enum TreeLock<T> {
    Mutex(Mutex<T>),
    RwLock(RwLock<T>),
}

/// Shared access (exclusive under `LockKind::Mutex`).
pub(super) enum ReadGuard<'a, T> {
    Mutex(MutexGuard<'a, T>),
    RwLock(RwLockReadGuard<'a, T>),
}

/// Exclusive access.
pub(super) enum WriteGuard<'a, T> {
    Mutex(MutexGuard<'a, T>),
    RwLock(RwLockWriteGuard<'a, T>),
}

impl<T> TreeLock<T> {
    pub(super) fn new(kind: LockKind, value: T) -> Self {
        match kind {
            LockKind::Mutex => TreeLock::Mutex(Mutex::new(value)),
            LockKind::RwLock => TreeLock::RwLock(RwLock::new(value)),
        }
    }

    // Poisoning is ignored (no user closure runs under the lock; see
    // `crate::sync::LockExt`).
    pub(super) fn read(&self) -> ReadGuard<'_, T> {
        match self {
            TreeLock::Mutex(m) => ReadGuard::Mutex(m.lock_unpoisoned()),
            TreeLock::RwLock(l) => ReadGuard::RwLock(l.read_unpoisoned()),
        }
    }

    pub(super) fn write(&self) -> WriteGuard<'_, T> {
        match self {
            TreeLock::Mutex(m) => WriteGuard::Mutex(m.lock_unpoisoned()),
            TreeLock::RwLock(l) => WriteGuard::RwLock(l.write_unpoisoned()),
        }
    }
}

impl<T> Deref for ReadGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        match self {
            ReadGuard::Mutex(g) => g,
            ReadGuard::RwLock(g) => g,
        }
    }
}

impl<T> Deref for WriteGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        match self {
            WriteGuard::Mutex(g) => g,
            WriteGuard::RwLock(g) => g,
        }
    }
}

impl<T> DerefMut for WriteGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        match self {
            WriteGuard::Mutex(g) => g,
            WriteGuard::RwLock(g) => g,
        }
    }
}
