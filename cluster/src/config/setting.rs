//! How a setting is declared: once, in the `settings!` list of the config module, which gives
//! its field, file key, flag, environment variable (or why it has none), default, doc line and
//! check. From that one list come the [`Config`](super::Config) struct and its `Default`, the
//! command-line flags ([`Flags`], clap's `Args` built from [`SETTINGS`](super::SETTINGS)), the
//! file's keys, `sdn-agent run --help` and the settings reference (`docs/settings.md`).
//!
//! Why not clap's derive: a derived `Flags` struct is a second list of the settings (its field,
//! help, default text and variable), kept beside the config struct by hand; it drifted.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use clap::{Arg, ArgAction, ArgMatches, Command};
use ipnet::Ipv4Net;

use super::values::{
    AuditFormat, ClusterNetworkSetting, ClusterStateSource, Listen, LogFormat, OvsdbTarget,
    ServiceNetworks, SyslogTarget,
};
use super::Config;

/// How a setting's flag takes values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arity {
    /// One value; given twice, the last counts.
    One,
    /// A switch: `--flag` alone is `true`, or `--flag=true|false`.
    Switch,
    /// Repeatable: every value counts, in order.
    Many,
}

/// A setting's environment variable, or why it has none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Env {
    /// `SDN_*`.
    Var(&'static str),
    /// No variable, and why.
    None(&'static str),
}

/// How a setting's default is shown (`--help`, the settings reference).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shown {
    /// The default as the flag would spell it (a test holds it to `Config::default()`).
    Value(&'static str),
    /// Words, where the default is computed or empty.
    Words(&'static str),
}

impl Shown {
    /// The default's text.
    pub fn text(self) -> &'static str {
        match self {
            Shown::Value(t) | Shown::Words(t) => t,
        }
    }
}

/// One setting.
#[derive(Debug, Clone, Copy)]
pub struct Setting {
    /// The Rust field of [`Config`].
    pub field: &'static str,
    /// The key in a configuration file (camelCase).
    pub key: &'static str,
    /// The flag, without `--`.
    pub flag: &'static str,
    /// The environment variable.
    pub env: Env,
    /// The value's name in `--help`.
    pub value_name: &'static str,
    /// What the setting does, in one line.
    pub doc: &'static str,
    /// The default.
    pub default: Shown,
    /// How the flag takes values.
    pub arity: Arity,
    /// Parses one value of the flag (clap's value parser).
    pub(super) parse_one: fn(&str) -> Result<String, String>,
    /// Sets the field from the flag's values.
    pub(super) apply: fn(&mut Config, &[String]) -> Result<(), String>,
    /// Checks the field's value in a whole configuration; the error names the setting.
    pub(super) check: fn(&Config) -> Result<(), String>,
}

impl Setting {
    /// Sets this setting of `cfg` from `values` as the flag would receive them.
    pub fn apply(&self, cfg: &mut Config, values: &[String]) -> Result<(), String> {
        for v in values {
            (self.parse_one)(v).map_err(|e| format!("--{} {v:?}: {e}", self.flag))?;
        }
        (self.apply)(cfg, values).map_err(|e| format!("--{}: {e}", self.flag))
    }

    /// Checks this setting's value in `cfg`.
    pub fn check(&self, cfg: &Config) -> Result<(), String> {
        (self.check)(cfg)
    }

    /// The help line: the doc line and the default.
    pub fn help(&self) -> String {
        let repeat = if self.arity == Arity::Many {
            ", repeatable"
        } else {
            ""
        };
        format!("{}{repeat} [default: {}]", self.doc, self.default.text())
    }

    fn arg(&self) -> Arg {
        let mut a = Arg::new(self.flag)
            .long(self.flag)
            .value_name(self.value_name)
            .help(self.help())
            .value_parser(clap::builder::ValueParser::new(self.parse_one));
        a = match self.arity {
            Arity::One => a.action(ArgAction::Set),
            Arity::Switch => a
                .action(ArgAction::Set)
                .num_args(0..=1)
                .default_missing_value("true"),
            Arity::Many => a.action(ArgAction::Append),
        };
        match self.env {
            Env::Var(v) => a.env(v),
            Env::None(_) => a,
        }
    }
}

/// A type a setting can hold: how its flag takes values and parses them.
pub(super) trait SettingValue: Sized {
    /// How the flag takes values.
    const ARITY: Arity = Arity::One;
    /// Parses one value as the flag gives it.
    fn parse_one(value: &str) -> Result<Self, String>;
    /// The value of the flag's values (the last for a single-valued flag).
    fn from_values(values: &[String]) -> Result<Self, String> {
        Self::parse_one(values.last().map_or("", String::as_str))
    }
}

/// Checks one value: for clap's value parser, which keeps the text.
pub(super) fn parse_text<T: SettingValue>(value: &str) -> Result<String, String> {
    T::parse_one(value).map(|_| value.to_string())
}

macro_rules! parsed_from_str {
    ($($t:ty),*) => {$(
        impl SettingValue for $t {
            fn parse_one(value: &str) -> Result<Self, String> {
                value.parse::<$t>().map_err(|e| e.to_string())
            }
        }
    )*};
}
parsed_from_str!(
    u16,
    u32,
    u64,
    usize,
    String,
    PathBuf,
    Ipv4Addr,
    std::net::IpAddr,
    Ipv4Net,
    SocketAddr,
    ClusterNetworkSetting,
    ServiceNetworks,
    ClusterStateSource,
    OvsdbTarget,
    Listen,
    LogFormat,
    AuditFormat,
    SyslogTarget,
    flows::Mode,
    flows::Datapath
);

impl SettingValue for bool {
    const ARITY: Arity = Arity::Switch;
    fn parse_one(value: &str) -> Result<Self, String> {
        match value {
            "true" => Ok(true),
            "false" => Ok(false),
            _ => Err("expected true or false".into()),
        }
    }
}

impl<T: SettingValue> SettingValue for Option<T> {
    const ARITY: Arity = T::ARITY;
    fn parse_one(value: &str) -> Result<Self, String> {
        T::parse_one(value).map(Some)
    }
}

impl<T: SettingValue> SettingValue for Vec<T> {
    const ARITY: Arity = Arity::Many;
    fn parse_one(value: &str) -> Result<Self, String> {
        T::parse_one(value).map(|v| vec![v])
    }
    fn from_values(values: &[String]) -> Result<Self, String> {
        values.iter().map(|v| T::parse_one(v)).collect()
    }
}

/// A check for a setting whose type says every value it can hold is good.
pub(super) fn any<T>(_: &T) -> Result<(), String> {
    Ok(())
}

/// Declares every setting once (see the module docs); used once, in the config module.
macro_rules! settings {
    ($(
        $field:ident: $ty:ty = $default:expr,
        key $key:literal, flag $flag:literal, env $env:expr, value $value:literal,
        shown $shown:expr, check $check:expr,
        doc $doc:literal;
    )*) => {
        /// The whole configuration: every setting of [`SETTINGS`], by its field.
        #[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
        #[serde(deny_unknown_fields, default)]
        pub struct Config {
            $(
                #[doc = $doc]
                #[serde(rename = $key)]
                pub $field: $ty,
            )*
        }

        impl Default for Config {
            fn default() -> Self {
                Config { $( $field: $default, )* }
            }
        }

        /// Every setting, in `--help` order.
        pub static SETTINGS: &[setting::Setting] = &[$(
            setting::Setting {
                field: stringify!($field),
                key: $key,
                flag: $flag,
                env: $env,
                value_name: $value,
                doc: $doc,
                default: $shown,
                arity: <$ty as setting::SettingValue>::ARITY,
                parse_one: setting::parse_text::<$ty>,
                apply: |cfg, values| {
                    cfg.$field = <$ty as setting::SettingValue>::from_values(values)?;
                    Ok(())
                },
                check: |cfg| {
                    let check: fn(&$ty) -> Result<(), String> = $check;
                    check(&cfg.$field)
                },
            },
        )*];
    };
}
pub(super) use settings;

/// The command-line flags: `--config` and every setting of
/// [`SETTINGS`](super::SETTINGS), each also from its environment variable. Unset flags leave
/// the configuration file's value (or the default) alone; a flag or its variable wins over the
/// file.
#[derive(Debug, Clone, Default)]
pub struct Flags {
    /// `--config`: a YAML or JSON file with the settings.
    pub config: Option<PathBuf>,
    /// The settings given, by index into `SETTINGS`, with their values.
    given: Vec<(usize, Vec<String>)>,
}

impl Flags {
    /// Sets `cfg`'s settings that these flags give.
    pub(super) fn apply_to(&self, cfg: &mut Config) -> Result<(), String> {
        for (i, values) in &self.given {
            super::SETTINGS[*i].apply(cfg, values)?;
        }
        Ok(())
    }
}

const CONFIG_FLAG: &str = "config";

impl clap::FromArgMatches for Flags {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let mut f = Flags::default();
        f.update_from_arg_matches(m)?;
        Ok(f)
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        if let Some(p) = m.get_one::<PathBuf>(CONFIG_FLAG) {
            self.config = Some(p.clone());
        }
        for (i, s) in super::SETTINGS.iter().enumerate() {
            if let Some(values) = m.get_many::<String>(s.flag) {
                self.given.retain(|(j, _)| *j != i);
                self.given.push((i, values.cloned().collect()));
            }
        }
        Ok(())
    }
}

impl clap::Args for Flags {
    fn augment_args(cmd: Command) -> Command {
        let cmd = cmd.arg(
            Arg::new(CONFIG_FLAG)
                .long(CONFIG_FLAG)
                .env("SDN_CONFIG")
                .value_name("FILE")
                .value_parser(clap::value_parser!(PathBuf))
                .help("YAML or JSON file with the settings below (keys in camelCase: nodeName, mtu, ...)"),
        );
        super::SETTINGS.iter().fold(cmd, |cmd, s| cmd.arg(s.arg()))
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

/// A clap error in this project's words where it has them: `unknown flag "--x"`, `--x needs a
/// value` and `--x "value": what is expected` (what operators and the tests grep for); any
/// other error as clap renders it, without its usage footer.
pub fn flag_error(e: &clap::Error) -> String {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let arg = match e.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(s)) => s.split_whitespace().next().unwrap_or("").to_string(),
        _ => String::new(),
    };
    let rendered = e.render().to_string();
    let first = rendered
        .lines()
        .next()
        .unwrap_or("")
        .trim_start_matches("error: ")
        .to_string();
    match e.kind() {
        ErrorKind::UnknownArgument => {
            let tip = match e.get(ContextKind::SuggestedArg) {
                Some(ContextValue::String(s)) => format!(" (did you mean {s}?)"),
                _ => String::new(),
            };
            format!("unknown flag {arg:?}{tip}")
        }
        ErrorKind::InvalidValue if rendered.contains("a value is required") => {
            format!("{arg} needs a value")
        }
        ErrorKind::ValueValidation => {
            let value = match e.get(ContextKind::InvalidValue) {
                Some(ContextValue::String(s)) => s.clone(),
                _ => String::new(),
            };
            match std::error::Error::source(e) {
                Some(why) => format!("{arg} {value:?}: {why}"),
                None => first,
            }
        }
        _ => first,
    }
}
