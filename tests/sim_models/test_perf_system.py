"""System descriptions: the shipped files load; malformed ones get one-line errors."""

import pytest

from sim_models.perf.system import SYSTEMS_DIR, SystemError, load_system, parse_system, shipped_systems


def test_shipped_systems():
    assert shipped_systems() == ["jalapeno-b0-like", "poblano-die-2x2", "poblano-tile", "poblano-ulx3s"]
    j = load_system("jalapeno-b0-like")
    assert j.die.flops == 13.4e15 and j.links.scale_up_bytes_per_s == 600e9
    assert j.links.scale_out_bytes_per_s == 200e9 and j.links.max_dies == 2048
    tile = load_system("poblano-tile")
    assert tile.die.flops == 2 * 2 * 64 * 49e6      # 2x2 block pairs of 32 MACs a cycle


def _text(**replace):
    text = (SYSTEMS_DIR / "poblano-tile.toml").read_text()
    for old, new in replace.items():
        assert old in text
        text = text.replace(old, new)
    return text


@pytest.mark.parametrize("replace, message", [
    ({"tiles = 1": "tiles = 2"}, "mesh_x \\* die.mesh_y \\(1\\) must equal die.tiles \\(2\\)"),
    ({"tiles = 1": "tiles = 0"}, "die.tiles: must be positive"),
    ({"clock_hz = 49e6": 'clock_hz = "fast"'}, "die.clock_hz: must be a number"),
    ({"lanes = 4": "lanes = 4.5"}, "die.lanes: must be an integer"),
    ({"lanes = 4": "lanez = 4"}, "unknown field 'lanez'"),
    ({"mac_pj = 0.015\n": ""}, "missing field 'mac_pj'"),
    ({'engine = "tile"': 'engine = "magic"'}, "die.engine must be"),
    ({"[links]": "[links"}, "not valid TOML"),
])
def test_malformed(replace, message):
    with pytest.raises(SystemError, match=message) as info:
        parse_system(_text(**replace), "f.toml")
    assert "\n" not in str(info.value) and str(info.value).startswith("f.toml")


def test_unknown_names_and_paths(tmp_path):
    with pytest.raises(SystemError, match="unknown system 'nope'.*jalapeno-b0-like"):
        load_system("nope")
    with pytest.raises(SystemError, match="no such system file"):
        load_system(tmp_path / "x.toml")
    (tmp_path / "s.toml").write_text(_text())
    assert load_system(tmp_path / "s.toml").name == "poblano-tile"
