"""Storage adapters for memkit, one subpackage per URL scheme."""
