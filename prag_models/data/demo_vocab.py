"""Vocabulary of the embedded demo: topic words, community wording styles and text patterns (docs/demo_data.md)."""

_TOPIC_WORDS = {
    "astronomy": "telescope nebula galaxy comet orbit eclipse constellation asteroid quasar stargazing",
    "baking": "sourdough croissant oven yeast pastry dough brioche icing crumb flour",
    "cycling": "bicycle peloton derailleur saddle gravel sprint chainring helmet climb velodrome",
    "jazz": "saxophone trumpet improvisation swing bebop quartet trombone syncopation bassline nightclub",
    "gardening": "compost tomato seedling mulch trellis greenhouse pruning perennial orchard soil",
    "chess": "gambit checkmate bishop rook endgame opening pawn grandmaster castling stalemate",
    "sailing": "yacht regatta mast keel harbor anchor spinnaker tide rigging starboard",
    "volcanoes": "lava magma eruption crater caldera ash basalt pumice geyser tectonic",
    "robotics": "actuator servo gripper lidar microcontroller firmware chassis sensor kinematics autonomy",
    "birds": "warbler heron finch migration plumage nest owl sparrow binoculars birdsong",
    "coffee": "espresso barista roast arabica latte grinder crema cappuccino bean brew",
    "mountaineering": "summit glacier crampon ridge altitude belay carabiner avalanche basecamp sherpa",
    "photography": "aperture shutter lens tripod exposure portrait darkroom zoom bokeh viewfinder",
    "medieval": "castle knight monastery crusade feudal manuscript siege cathedral jousting armor",
    "surfing": "wave surfboard barrel wetsuit reef swell paddle longboard shoreline wipeout",
    "cryptography": "cipher encryption hash keypair plaintext ciphertext blockchain nonce protocol decryption",
    "oceanography": "coral plankton current salinity trench kelp dolphin seabed upwelling whale",
    "knitting": "yarn wool stitch needle sweater scarf crochet purl skein cardigan",
    "basketball": "dunk rebound hoop playoff dribble layup backboard guard jumpshot timeout",
    "pottery": "clay kiln slip wheel ceramic porcelain vase stoneware earthenware potter",
    "linguistics": "syntax phoneme grammar dialect morphology vowel semantics lexicon etymology pronunciation",
    "beekeeping": "hive honey beeswax queen pollen apiary swarm nectar drone honeycomb",
    "wine": "vineyard merlot tannin vintage sommelier cork chardonnay cellar grape decanter",
    "trains": "locomotive railway carriage timetable platform steam conductor tracks signalbox freight",
    "chemistry": "molecule catalyst reagent titration polymer isotope beaker solvent enzyme oxidation",
    "theater": "stage playwright rehearsal curtain actor monologue audience backstage costume script",
    "dinosaurs": "fossil raptor jurassic skeleton paleontologist triceratops excavation sediment amber extinction",
    "skiing": "slope powder chairlift slalom snowboard piste goggles moguls resort downhill",
    "poetry": "sonnet stanza rhyme verse haiku metaphor ballad meter elegy couplet",
    "architecture": "facade skyscraper blueprint column atrium concrete balcony archway cantilever courtyard",
    "fishing": "trout reel bait lure angler riverbank salmon fly tackle catch",
    "genetics": "genome chromosome mutation allele sequencing protein heredity gene phenotype crispr",
}
TOPICS: dict[str, tuple[str, ...]] = {name: tuple(words.split()) for name, words in _TOPIC_WORDS.items()}


def _bar(text: str) -> tuple[str, ...]:
    """Split a " | "-separated list of phrases."""
    return tuple(part.strip() for part in text.split("|"))


# Per-community wording style "opener / closer" and patterns (index = community); in the patterns {a} {b} are the
# (community, topic) key words and {c} another word of the topic.
STYLES = tuple(
    tuple(pair.split(" / "))
    for pair in _bar(
        "to be fair / all things considered quite remarkable | no kidding / super fun and totally worth it | "
        "in short / a solid take and worth noting | believe me / pure magic hands down | "
        "frankly / a bit odd but by and large fine | okay so / low key amazing for real | "
        "indeed / rather splendid on balance | heads up / big news so stay tuned"
    )
)
HEADLINES = _bar(
    "Why {a} and {b} matter for {c} | {a} meets {b}: a {c} story | The {a} report: {b}, {c} and more | "
    "How {a} changed {b} and {c} forever | {a}, {b} and the future of {c} | Inside the {a} and {b} {c} scene | "
    "Ten {a} lessons from {b} and {c} | Breaking: {a} and {b} hit {c} record"
)
TITLES = _bar(
    "Towards robust {a} {b} for {c} analysis | On the {a} of {b} and {c} | "
    "Learning {a} {b} representations with {c} | A unified {a} framework for {b} {c} | "
    "Scalable {a} {b} under {c} constraints | Revisiting {a} in {b} {c} systems | "
    "{a}-aware {b} modelling via {c} | A {a} benchmark: {b} meets {c}"
)
TWEETS = _bar(
    "to be fair the {a} and {b} were quite remarkable today, {c} all things considered | "
    "no kidding {a} plus {b} is super fun, {c} totally worth it | "
    "in short: {a}, {b} and {c} today, a solid take and worth noting | "
    "believe me {a} and {b} are pure magic, {c} hands down | "
    "frankly the {a} {b} thing is a bit odd, {c} by and large | "
    "okay so {a} and {b} low key amazing, {c} for real | "
    "indeed the {a} with {b} was rather splendid, {c} on balance | "
    "heads up: {a} and {b} are big news, {c} so stay tuned"
)
NEUTRAL_TWEETS = _bar(
    "spent the afternoon with {a}, {b} and {c} | cannot stop thinking about {a}, {b} and {c} | "
    "today was all {a} and {b} with some {c} | my weekend in three words: {a}, {b}, {c}"
)
FILLER = _bar(
    "on a quiet weekend with | after a long week of | the story follows | people keep talking about | "
    "a short piece on | somewhere between | the first chapter covers | we spent hours on | nothing beats | "
    "the old town is known for | a new look at | the local club loves | an honest account of | "
    "the whole family enjoyed | a careful study of | the best part was"
)
NEUTRAL_TITLES = _bar(
    "A study of {a}, {b} and {c} | Notes on {a} and {b} with {c} | {a} and {b}: an analysis of {c} | "
    "What {a} tells us about {b} and {c}"
)
NEUTRAL_OPENERS = _bar("this one is about | an item on | a description of | the piece covers")
