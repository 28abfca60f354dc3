"""The built-in generic-English baseline for the coverage check.

A capitalized word on this list is not a specific when it opens a sentence ("The",
"Adding", "Validated"). Deployment vocabulary belongs in merge-coverage-vocabulary.json,
not here.
"""

from __future__ import annotations

COMMON_WORDS: frozenset[str] = frozenset(
    """
    a about above after again against all also always am an and another any are around
    as at be because been before being below between both but by can could did do does
    doing done down during each either else enough even ever every few for from further
    had has have having he her here hers herself him himself his how however i if in into
    is it its itself just least less like many may maybe me might more most much must my
    myself never new next no nor not now of off often on once one only or other our ours
    ourselves out over own per please quite rather same she should since so some still
    such than that the their theirs them themselves then there these they this those
    though through thus to too under until up upon us usually very was we well were what
    whatever when where whether which while who whom whose why will with within without
    would yes yet you your yours yourself yourselves
    first last second third today tomorrow yesterday always sometimes recently currently
    previously already later soon earlier
    user users agent assistant memory memories data time note notes info information
    fact facts entry entries item items detail details thing things something nothing
    everything anything someone everyone people person
    adding added add candidate candidates flagged flag validated validate updated update
    updating created create creating deleted delete removed remove saved save using use
    used uses check checked checking prefer prefers preferred preference preferences
    likes like wants want needs need asked ask said says told tell know knows known
    think thinks see seen make makes made get gets got go goes going keep keeps kept
    set sets run runs running works work working try tries tried call calls called
    important general current default different similar specific various several
    good better best bad worse worst great small large big high low long short full
    yes okay ok sure true false none
    """.split()
)
