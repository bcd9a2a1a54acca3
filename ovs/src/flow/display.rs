//! placeholder: being written
use std::fmt;
/// Table and port names.
#[derive(Debug, Default, Clone)]
pub struct Names;
/// x
#[derive(Debug)]
pub struct FlowText;
impl fmt::Display for super::Flow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self:?}")
    }
}
