"""The development harness: the hostile-input surfaces (`hostile`), the store audit of the
kill-storm benchmark (`audit`), the adversarial LLM (`adversary`) and the year of dream
cycles (`dream_year`). Used by the tests and by bench/; never installed (pyproject's
package list names only `dreamkeeper.*`), so it may import any layer and dev extras such
as hypothesis."""
