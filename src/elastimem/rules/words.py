"""Word lists for rule capture (``capture``, ``endings``): what a capitalised word after
"I'm" is when it is not a name, and which places and employers are not places or employers.

Kept apart from the patterns so the patterns stay readable. Every list is lowercase and
compared with ``str.casefold``.
"""

from __future__ import annotations


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# "I'm Tired", "I'm Sorry", "I'm Back": adjectives, participles, adverbs and function words
# that follow "I'm" at a sentence start and are capitalised by habit, not because they name.
STATE_WORDS = _words(
    """
    tired sorry good fine great okay ok alright allright back ready excited not so very really
    just still also here home done happy sad glad sure afraid hungry thirsty bored busy free
    late early sick ill well confused curious stuck lost new old interested worried stressed
    scared nervous angry mad upset frustrated annoyed thinking trying going gonna looking
    working planning wondering using getting having doing feeling learning writing reading
    building making running starting leaving moving coming about in on off out up down over
    all always never probably definitely actually currently now literally basically honestly
    kind sort like pretty quite too totally almost only married single divorced engaged
    pregnant retired unemployed employed allergic male female human hot cold warm cool
    awesome amazing alive dead awake asleep finished impressed disappointed grateful thankful
    blessed proud lucky right wrong aware unsure certain positive negative convinced
    responsible available unavailable online offline away gone exhausted starving freezing
    dying kidding joking serious confident terrified obsessed addicted familiar allowed able
    unable someone somebody nobody everyone everybody anyone anybody one myself me you it
    this that what who where sure yes no yeah hi hello hey listening trying stoked pumped
    hyped thrilled delighted pleased relieved shocked surprised amazed stunned speechless
    embarrassed ashamed guilty jealous envious lonely depressed anxious overwhelmed
    burned burnt fed sick sleepy drunk high sober broke poor fat thin tall short young
    older younger big small strong weak healthy unwell better worse best worst fun funny
    boring bad terrible awful horrible fantastic wonderful perfect fab fabulous cute
    beautiful ugly smart stupid dumb clever crazy insane nuts weird normal fine fair
    honest sincere open around nearby outside inside upstairs downstairs
    there somewhere everywhere nowhere bi gay straight queer trans lesbian nonbinary
    introverted extroverted shy quiet loud calm chill relaxed focused motivated determined
    committed dedicated meh following replying responding asking checking
    calling texting writing emailing sending trying hoping waiting wanting needing
    surprised also totally completely absolutely almost nearly barely hardly
    literally seriously genuinely truly simply merely still yet already even though
    because since whether either neither both each every much many more most less least
    few several some any no none the a an your yours his her hers their theirs my mine our
    ours its with at from into onto to for of by as than then when while if unless until
    after before during against between among through across behind beyond under above
    below near far off-topic afk brb
    """
)

# "I'm Canadian", "I'm Christian": nationalities, demonyms, religions and similar labels
# describe a person; they are not what the person is called.
DEMONYM_WORDS = _words(
    """
    afghan albanian algerian american andorran angolan argentine argentinian armenian
    australian austrian azerbaijani bahamian bahraini bangladeshi barbadian belarusian
    belgian belizean beninese bhutanese bolivian bosnian brazilian british bruneian
    bulgarian burmese burundian cambodian cameroonian canadian chadian chilean chinese
    colombian congolese croatian cuban cypriot czech danish dominican dutch ecuadorian
    egyptian emirati english eritrean estonian ethiopian fijian filipino filipina finnish
    french gabonese gambian georgian german ghanaian greek grenadian guatemalan guinean
    guyanese haitian honduran hungarian icelandic indian indonesian iranian iraqi irish
    israeli italian ivorian jamaican japanese jordanian kazakh kenyan korean kosovar
    kuwaiti kyrgyz laotian latvian lebanese liberian libyan lithuanian luxembourgish
    macedonian malagasy malawian malaysian maldivian malian maltese mauritanian mauritian
    mexican moldovan monegasque mongolian montenegrin moroccan mozambican namibian nepalese
    nepali nicaraguan nigerian nigerien norwegian omani pakistani palestinian panamanian
    paraguayan persian peruvian polish portuguese qatari romanian russian rwandan
    salvadoran samoan saudi scottish scots senegalese serbian singaporean slovak
    slovakian slovenian somali spanish srilankan sudanese surinamese swazi swedish swiss
    syrian taiwanese tajik tanzanian thai togolese tongan trinidadian tunisian turkish
    turkmen ugandan ukrainian uruguayan uzbek venezuelan vietnamese welsh yemeni zambian
    zimbabwean european asian african arab arabic latin latino latina latinx hispanic
    caribbean scandinavian nordic balkan slavic celtic anglo native indigenous aboriginal
    black white brown mixed biracial jewish muslim christian catholic protestant orthodox
    hindu buddhist sikh jain mormon baptist methodist lutheran anglican evangelical
    pentecostal presbyterian quaker amish pagan wiccan atheist agnostic spiritual religious
    secular shia sunni zen taoist bahai texan californian floridian new yorker londoner
    parisian bostonian canuck kiwi aussie brit yankee southern northern eastern western
    midwestern
    """
)

# Diet words are captured by the diet rule, never as a name ("I'm Vegan").
DIET_LABELS = _words("vegetarian vegan pescatarian")

# Days, months and a few words that read as a name at a sentence start ("This is Tuesday").
CALENDAR_WORDS = _words(
    """
    monday tuesday wednesday thursday friday saturday sunday january february march april
    may june july august september october november december today tomorrow tonight
    yesterday christmas easter halloween thanksgiving
    """
)

# Not a name after "this is" at the start of a message: places and things a message
# introduces ("This is Python code", "This is England").
THIS_IS_WORDS = _words(
    """
    python java javascript typescript rust go linux windows mac macos ios android google
    apple amazon microsoft chatgpt claude gpt england america france germany spain italy
    japan china india canada mexico brazil russia europe asia africa australia sparta
    insane crazy ridiculous wild amazing awesome great fine huge big bad nice cool
    """
)

NOT_NAMES = STATE_WORDS | DEMONYM_WORDS | DIET_LABELS | CALENDAR_WORDS

# A second capitalised word that starts a new phrase, not a surname ("I'm Anna And ...").
NAME_BREAK_WORDS = _words(
    """
    and or but from of to the a an in at on for with by is are was am i im i'm here
    there now today again too also so if when btw
    """
)

# Lowercase words that may follow a self-introduced name: "I'm Daniel and I code",
# "I'm Daniel from Madrid", "I'm Daniel by the way". Any other lowercase word means the
# capitalised word was not a name ("I'm Android developer").
AFTER_NAME_WORDS = _words(
    """
    and from here btw by but nice speaking again too also so if i im i'm i've i'd i'll
    writing calling texting checking reaching with lol haha
    """
)

# What "moved to", "live in" and "I'm from" take that is not a place: tools, languages,
# teams, months, states of mind ("I live in fear", "we moved to Postgres").
NOT_PLACES = CALENDAR_WORDS | _words(
    """
    python java javascript typescript rust go golang ruby php perl scala kotlin swift
    haskell elixir erlang clojure julia matlab fortran cobol linux windows mac macos ios
    android ubuntu debian fedora arch vim neovim emacs vscode code react vue angular svelte
    django flask rails node nodejs deno postgres postgresql mysql sqlite mongodb mongo
    redis kafka docker kubernetes terraform aws azure gcp heroku vercel netlify github
    gitlab bitbucket jira slack teams zoom notion obsidian spotify iphone pixel excel
    sheets word powerpoint figma sketch photoshop chrome firefox safari edge twitter
    facebook instagram tiktok reddit discord whatsapp telegram signal threads mastodon
    bluesky youtube netflix sales marketing engineering finance accounting hr it legal
    product design support operations ops management research production qa devops
    security remote hybrid night nights fear denial hope peace sin luxury poverty comfort
    harmony style misery squalor limbo fantasy doubt terror dread pain shame debt
    isolation hiding exile bliss silence darkness chaos hell heaven paradise reality
    interesting strange uncertain dark hard tough difficult crazy weird modern exciting
    challenging unprecedented anticipation hopes suspense panic agony town city country
    suburbs countryside downtown uptown campus school college university work office
    around nowhere somewhere everywhere anywhere elsewhere abroad overseas nearby
    """
)

# Words an employer capture cannot start with ("I work at night", "I work for free",
# "I work at my desk").
# British spellings in a favorite's subject, written the American way so "my favourite
# colour" and "my favorite color" set one key.
AMERICAN_SPELLINGS = {
    "colour": "color", "colours": "colors", "flavour": "flavor", "flavours": "flavors",
    "theatre": "theater", "programme": "program", "humour": "humor", "jewellery": "jewelry",
    "centre": "center", "neighbourhood": "neighborhood", "harbour": "harbor",
    "cheque": "check", "aeroplane": "airplane", "pyjamas": "pajamas", "grey": "gray",
}  # fmt: skip

# First words of places that are never a place alone: a lowercase place starting with one
# takes the next word too ("i live in new york", "i moved to san diego").
PLACE_FIRST_WORDS = _words(
    """
    new san santa los las hong sri buenos tel abu kuala rio sao são puerto baton salt st saint
    fort port mount palo addis costa cape ho
    """
)
# Words after such a first word that make no place: "i moved to new place", "a new job".
NOT_PLACE_SECOND_WORDS = _words(
    """
    place places job jobs apartment flat house home city town school team company role office
    neighborhood neighbourhood area building room country state position department project
    one ones friends people stuff things
    """
)
# Inside a place, a word that needs the word after it ("rio de janeiro", "salt lake city").
PLACE_JOINING_WORDS = _words("de do da del dos das di lake")

NOT_EMPLOYERS = _words(
    """
    my your our his her their this that these those some any night nights weekends
    weekend noon dawn midnight free fun money cash tips minimum least most scale speed
    pace times full part it everything nothing anything something
    yourself himself herself themselves me you him us them whoever
    hire peanuts pennies nothing food
    """
)

# Things people say they are "allergic to" in jest ("I'm allergic to Mondays").
NOT_ALLERGENS = CALENDAR_WORDS | _words(
    """
    mondays tuesdays wednesdays thursdays fridays mornings work working people you
    everything nothing exercise homework responsibility effort commitment math maths
    cleaning meetings email emails small talk adulting chores running gyms deadlines
    """
)

# Words that cannot start a place, hometown or occupation (possessives and determiners:
# "I moved to my parents' house").
NOT_VALUE_STARTS = _words("my your our his her their this that these those some any")

# Head nouns of an occupation after "I'm a/an ...": "I'm a nurse", "I'm a software
# engineer". "I'm a big fan" or "I'm a terrible cook" is no job.
OCCUPATION_NOUNS = _words(
    """
    engineer developer programmer nurse teacher doctor physician surgeon lawyer attorney
    designer manager accountant scientist researcher analyst consultant architect writer
    journalist reporter chef electrician plumber carpenter mechanic pilot pharmacist dentist
    therapist psychologist psychiatrist counselor counsellor librarian professor lecturer
    firefighter paramedic farmer baker barista bartender waiter waitress cashier
    photographer artist illustrator animator musician composer actor actress editor
    translator interpreter veterinarian vet midwife student teacher tutor coach trainer
    technician administrator sysadmin clerk secretary receptionist salesman saleswoman
    salesperson recruiter economist statistician mathematician physicist chemist biologist
    geologist astronomer paralegal judge detective officer soldier sailor marine
    firefighter optometrist radiologist anesthesiologist pediatrician dermatologist
    cardiologist neurologist oncologist surveyor welder machinist electrician roofer
    landscaper gardener florist tailor hairdresser barber stylist cosmetologist
    beautician realtor broker banker trader investor entrepreneur founder ceo cto cfo
    coo freelancer contractor copywriter blogger podcaster streamer youtuber influencer
    producer director filmmaker dancer choreographer singer songwriter poet novelist
    author historian archaeologist anthropologist sociologist philosopher linguist
    pastor priest rabbi imam minister chaplain nanny caregiver housekeeper janitor
    custodian driver trucker courier dispatcher logistician auditor underwriter actuary
    curator archivist zookeeper pharmacologist epidemiologist nutritionist dietitian
    dietician physiotherapist chiropractor paramedic emt phlebotomist sonographer
    hygienist
    """
)

# Words that may follow a job noun in a compound job title: "nurse practitioner",
# "teaching assistant", "project manager".
JOB_TAIL_NOUNS = _words(
    """
    practitioner assistant aide lead specialist coordinator officer director supervisor
    educator apprentice intern trainee representative associate partner manager
    technician analyst consultant
    """
)

# Forms of address: "I'm Dr. Patel", "call me Professor Okoye" name a title, not a name.
TITLE_WORDS = _words(
    """
    dr doctor mr mrs ms miss mx prof professor sir madam madame dame lord lady captain
    officer father sister brother uncle aunt auntie grandma grandpa granny mom mum mommy
    dad daddy doc nurse rev reverend pastor rabbi imam judge detective sergeant agent
    president senator mayor chef coach
    """
)

# First names that end like a participle ("Jared", "Sterling"): not "I'm Cooked".
PARTICIPLE_NAMES = _words(
    """
    ahmed mohammed muhammed mohamed mohammad alfred mildred jared winifred manfred
    siegfried wilfred sterling irving channing manning fleming harding browning golding
    """
)

# Words before the head noun that make "I'm a ... <job>" no statement of a job: "I'm a
# terrible writer", "I'm a former nurse", "I'm a big fan of engineers".
NOT_OCCUPATION_MODIFIERS = _words(
    """
    former ex retired future aspiring wannabe would-be recovering failed fake pretend
    terrible awful bad good great decent better best worse worst horrible lousy poor
    amazing big huge little bit natural born wonderful excellent fantastic lazy slow
    of for to with like than as at in on from by and or the a an fan kind sort type
    lot friend son daughter wife husband mother father mom dad child kid brother sister
    """
)

# Time words that say when a favourite holds, not what it is of: "my favorite band these
# days is ..." keys on favorite_band.
FAVORITE_TIME_PHRASES = (
    "these days",
    "right now",
    "at the moment",
    "at the minute",
    "at present",
    "as of now",
    "for now",
    "lately",
    "of late",
    "currently",
    "nowadays",
    "recently",
    "now",
    "today",
    "ever",
    "of all time",
    "so far",
    "this year",
    "this month",
    "this week",
    "this season",
    "this summer",
    "this winter",
    "this spring",
    "this fall",
    "this autumn",
)
