"""Numbers a reader takes in at a glance (dsbench/units.py): a plan for a test model printed 0.00B parameters and
0.0 GiB per GPU."""

from dsbench.units import gib_text, params_text


def test_a_parameter_count_keeps_its_digits_at_every_scale():
    # Llama-2-7B's 6,738,415,616 parameters, the "6.7B" of Touvron et al. 2023 (Table 1's 7B model)
    assert params_text(6_738_415_616) == "6.74B"
    assert params_text(1_350_000) == "1.35M" and params_text(12_345) == "12.3K" and params_text(999) == "999"


def test_gib_shows_two_significant_digits_below_a_tenth():
    assert [gib_text(v) for v in (0, 0.0126, 0.01, 0.0999, 0.25, 1234.56)] == [
        "0.0", "0.013", "0.010", "0.1", "0.2", "1,234.6"]
