pub(crate) mod demo;
pub(crate) mod verify;
