//! A checkpoint on disk: its `_metadata` (which files hold each operator
//! subtask's state, source positions, channel state), where it lives, and
//! how to read one back (`weir checkpoint inspect`, the `checkpoint` connector).

pub mod inspect;
pub mod metadata;
pub mod remote;
pub mod storage;
