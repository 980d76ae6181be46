/// Arithmetic that stops at the type's bounds instead of trapping: for numbers that come from outside (headers,
/// requests, configuration), where Swift's checked `+`, `-` and `*` would crash the daemon on an overflow.
extension FixedWidthInteger {
    /// `self + other`, or the nearest bound when the sum does not fit.
    public func saturatingAdd(_ other: Self) -> Self {
        let (sum, overflow) = addingReportingOverflow(other)
        guard overflow else { return sum }
        return other > 0 ? .max : .min
    }

    /// `self - other`, or the nearest bound when the difference does not fit.
    public func saturatingSubtract(_ other: Self) -> Self {
        let (difference, overflow) = subtractingReportingOverflow(other)
        guard overflow else { return difference }
        return other > 0 ? .min : .max
    }

    /// `self * other`, or the nearest bound when the product does not fit.
    public func saturatingMultiply(_ other: Self) -> Self {
        let (product, overflow) = multipliedReportingOverflow(by: other)
        guard overflow else { return product }
        return (self < 0) == (other < 0) ? .max : .min
    }
}
