//! Element types the communicator sends as typed slices, and the reduce
//! operations of [`super::Communicator::reduce`] and friends.

/// A reduction applied element by element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    /// Sum (integers wrap on overflow, as in MPI).
    Sum,
    /// Minimum.
    Min,
    /// Maximum.
    Max,
    /// Product (integers wrap on overflow).
    Prod,
}

impl ReduceOp {
    pub(crate) fn code(self) -> u8 {
        match self {
            ReduceOp::Sum => 1,
            ReduceOp::Min => 2,
            ReduceOp::Max => 3,
            ReduceOp::Prod => 4,
        }
    }
}

/// An element type of typed sends and collectives: plain old data (cast to
/// and from bytes with `bytemuck`, no `unsafe`), with the reductions.
pub trait Datatype: bytemuck::Pod + Send + Sync + 'static {
    /// Code carried in collective headers, to catch ranks that disagree.
    const CODE: u8;
    /// `acc[i] = acc[i] op other[i]` for every `i` (`acc` and `other` have
    /// the same length).
    fn reduce(op: ReduceOp, acc: &mut [Self], other: &[Self]);
}

macro_rules! int_type {
    ($t:ty, $code:expr) => {
        impl Datatype for $t {
            const CODE: u8 = $code;
            fn reduce(op: ReduceOp, acc: &mut [Self], other: &[Self]) {
                let f: fn($t, $t) -> $t = match op {
                    ReduceOp::Sum => <$t>::wrapping_add,
                    ReduceOp::Prod => <$t>::wrapping_mul,
                    ReduceOp::Min => std::cmp::min,
                    ReduceOp::Max => std::cmp::max,
                };
                for (a, b) in acc.iter_mut().zip(other) {
                    *a = f(*a, *b);
                }
            }
        }
    };
}

macro_rules! float_type {
    ($t:ty, $code:expr) => {
        impl Datatype for $t {
            const CODE: u8 = $code;
            fn reduce(op: ReduceOp, acc: &mut [Self], other: &[Self]) {
                match op {
                    ReduceOp::Sum => acc.iter_mut().zip(other).for_each(|(a, b)| *a += *b),
                    ReduceOp::Prod => acc.iter_mut().zip(other).for_each(|(a, b)| *a *= *b),
                    ReduceOp::Min => acc.iter_mut().zip(other).for_each(|(a, b)| *a = a.min(*b)),
                    ReduceOp::Max => acc.iter_mut().zip(other).for_each(|(a, b)| *a = a.max(*b)),
                }
            }
        }
    };
}

int_type!(u8, 1);
int_type!(i32, 2);
int_type!(i64, 3);
float_type!(f32, 4);
float_type!(f64, 5);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reductions_apply_elementwise() {
        let mut a = [1i32, 5, i32::MAX];
        i32::reduce(ReduceOp::Sum, &mut a, &[2, -5, 1]);
        assert_eq!(a, [3, 0, i32::MIN]);
        let mut f = [1.0f64, -2.0];
        f64::reduce(ReduceOp::Max, &mut f, &[0.5, 3.0]);
        assert_eq!(f, [1.0, 3.0]);
        f64::reduce(ReduceOp::Prod, &mut f, &[2.0, 2.0]);
        assert_eq!(f, [2.0, 6.0]);
        let mut u = [200u8, 3];
        u8::reduce(ReduceOp::Min, &mut u, &[100, 9]);
        assert_eq!(u, [100, 3]);
    }
}
