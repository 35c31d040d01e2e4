"""The README's "FiBA as a library" example runs as written."""

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def library_example() -> str:
    section = README.read_text().split("## FiBA as a library", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert len(blocks) == 1, "the library section has exactly one python example"
    return blocks[0]


def test_readme_library_example_runs() -> None:
    code = library_example()
    assert "FiBA" in code
    exec(compile(code, str(README), "exec"), {"__name__": "readme_example"})
