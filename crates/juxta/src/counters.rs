//! Counters declared once: the live atomics a service bumps where things
//! happen, and the plain snapshot struct its public `stats()` returns, so
//! no public API hands out atomics that callers could change.

/// Declares a public snapshot struct of `u64` fields and a crate-private
/// struct of `AtomicU64`s with the same fields and a `snapshot()` method.
macro_rules! counters {
    (
        $(#[$smeta:meta])*
        pub struct $snap:ident;
        $(#[$lmeta:meta])*
        struct $live:ident;
        {
            $($(#[$doc:meta])* $name:ident,)*
        }
    ) => {
        $(#[$smeta])*
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        #[non_exhaustive]
        pub struct $snap {
            $($(#[$doc])* pub $name: u64,)*
        }

        $(#[$lmeta])*
        #[derive(Debug, Default)]
        pub(crate) struct $live {
            $(pub(crate) $name: std::sync::atomic::AtomicU64,)*
        }

        impl $live {
            /// Reads every counter (each one atomically, not all at one
            /// instant).
            pub(crate) fn snapshot(&self) -> $snap {
                $snap {
                    $($name: self.$name.load(std::sync::atomic::Ordering::Relaxed),)*
                }
            }
        }
    };
}

pub(crate) use counters;
